// The JavaScript twins of issue 21's scenarios, through the unmodified E2B JavaScript SDKs
// (`e2b` and `@e2b/code-interpreter`, exact versions in package.json), configured only by
// E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY: gzip on /files, getInfo's fields, watchDir,
// signed URLs of a secure sandbox, getMetrics, snapshots, a PTY, JavaScript state across a
// pause, `sudo`, Image.show(), and runCode on a killed sandbox. The Python SDK's versions of
// these are in sdk/python/tests/test_e2b_*.py.
//
// Run by sdk/python/tests/test_e2b_js.py against a live `sandlot serve`; by hand:
//   E2B_API_URL=http://127.0.0.1:PORT E2B_SANDBOX_URL=http://127.0.0.1:PORT \
//   E2B_API_KEY=$(cat DATA_DIR/e2b-api-key) node twins.mjs
// Prints one line per step and "TWINS OK" at the end; exits non-zero on a failure.

import assert from 'node:assert/strict'
import { Sandbox } from '@e2b/code-interpreter'
import { FilesystemEventType, Sandbox as BaseSandbox } from 'e2b'

for (const name of ['E2B_API_URL', 'E2B_SANDBOX_URL', 'E2B_API_KEY']) {
  if (!process.env[name]) {
    console.error(`set ${name}`)
    process.exit(2)
  }
}

const PNG_MAGIC = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])
const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

function step(name) {
  console.log(`ok - ${name}`)
}

async function until(what, check, ms = 5000) {
  const end = Date.now() + ms
  for (;;) {
    const got = await check()
    if (got) return got
    if (Date.now() > end) assert.fail(`timed out waiting for ${what}`)
    await sleep(20)
  }
}

const made = []
try {
  const sbx = await Sandbox.create({ timeoutMs: 300_000, secure: true })
  made.push(sbx)

  // gzip both ways, and what getInfo says of a file and a directory.
  const text = 'gzip '.repeat(2000)
  await sbx.files.write('/home/user/z.txt', text, { gzip: true })
  assert.equal(await sbx.files.read('/home/user/z.txt', { gzip: true }), text)
  const info = await sbx.files.getInfo('/home/user/z.txt')
  assert.equal(info.type, 'file')
  assert.equal(info.size, text.length)
  assert.equal(info.path, '/home/user/z.txt')
  assert.equal(info.owner, 'user')
  assert.match(info.permissions, /^-rw/)
  assert.ok(info.modifiedTime instanceof Date)
  await sbx.files.makeDir('/home/user/d')
  assert.equal((await sbx.files.getInfo('/home/user/d')).type, 'dir')
  step('files: gzip write/read and getInfo')

  // watchDir, recursive: a command's writes arrive as events.
  const events = []
  await sbx.files.makeDir('/home/user/w/sub')
  const watch = await sbx.files.watchDir('/home/user/w', (e) => events.push(e), { recursive: true })
  await sbx.commands.run('echo a > /home/user/w/one.txt; echo b > /home/user/w/sub/two.txt')
  await until('watch events', () =>
    events.some((e) => e.name === 'sub/two.txt' && e.type === FilesystemEventType.CREATE) &&
    events.some((e) => e.name === 'one.txt'),
  )
  await watch.stop()
  await assert.rejects(sbx.files.watchDir('/home/user/missing', () => {}))
  step('files.watchDir (recursive), and a missing directory refused')

  // Signed URLs of a secure sandbox: a good one reads and writes, a tampered one is refused.
  const down = await sbx.downloadUrl('/home/user/z.txt', { useSignatureExpiration: 60 })
  assert.equal(await (await fetch(down)).text(), text)
  const bad = new URL(down)
  bad.searchParams.set('signature', `v1_${'A'.repeat(43)}`)
  assert.equal((await fetch(bad)).status, 401)
  const up = await sbx.uploadUrl('/home/user/up.txt')
  const form = new FormData()
  form.append('file', new Blob(['uploaded']), 'up.txt')
  assert.equal((await fetch(up, { method: 'POST', body: form })).status, 200)
  assert.equal(await sbx.files.read('/home/user/up.txt'), 'uploaded')
  step('signed download/upload URLs; a wrong signature is 401')

  // A PTY: input in, output out, then killed.
  let out = ''
  const pty = await sbx.pty.create({
    cols: 80,
    rows: 24,
    onData: (d) => {
      out += Buffer.from(d).toString()
    },
  })
  await sbx.pty.sendInput(pty.pid, new TextEncoder().encode('echo pty-$((20+22))\n'))
  await until('pty output', () => out.includes('pty-42'))
  assert.equal(await sbx.pty.kill(pty.pid), true)
  step('pty.create/sendInput/kill')

  // sudo runs as the sandbox's user; a command's envs stay its own.
  assert.equal((await sbx.commands.run('echo $FOO', { envs: { FOO: 'bar' } })).stdout, 'bar\n')
  assert.equal((await sbx.commands.run('sudo echo "[$FOO]"')).stdout, '[]\n')
  step('commands: scoped envs, sudo')

  // Image.show() comes back as a PNG.
  const shown = await sbx.runCode("from PIL import Image\nImage.new('RGB', (8, 8), 'red').show()")
  assert.equal(shown.error, undefined, JSON.stringify(shown.error))
  assert.ok(Buffer.from(shown.results[0].png, 'base64').subarray(0, 8).equals(PNG_MAGIC))
  step('Image.show() as a PNG')

  // Metrics: at least the point taken at creation.
  const metrics = await sbx.getMetrics()
  assert.ok(metrics.length >= 1, JSON.stringify(metrics))
  assert.ok(metrics[0].cpuCount >= 1 && metrics[0].memTotal > 0, JSON.stringify(metrics[0]))
  step('getMetrics')

  // JavaScript and Python state through a pause and a connect.
  await sbx.runCode('const kept = 6 * 7', { language: 'js' })
  await sbx.runCode('py_kept = 41 + 1')
  assert.equal(await sbx.pause(), true)
  const back = await Sandbox.connect(sbx.sandboxId)
  assert.equal((await back.runCode('kept', { language: 'js' })).text, '42')
  assert.equal((await back.runCode('py_kept')).text, '42')
  step('pause and connect keep JavaScript and Python state')

  // A snapshot, listed, a sandbox made from it, deleted.
  await back.files.write('/home/user/snap.txt', 'in the snapshot')
  const snap = await back.createSnapshot()
  assert.ok(snap.snapshotId)
  const listed = []
  const pages = BaseSandbox.listSnapshots({ sandboxId: back.sandboxId })
  while (pages.hasNext) listed.push(...(await pages.nextItems()).map((s) => s.snapshotId))
  assert.ok(listed.includes(snap.snapshotId), JSON.stringify(listed))
  const child = await Sandbox.create(snap.snapshotId, { timeoutMs: 120_000 })
  made.push(child)
  assert.equal(await child.files.read('/home/user/snap.txt'), 'in the snapshot')
  assert.equal((await child.runCode('py_kept')).text, '42')
  assert.equal(await BaseSandbox.deleteSnapshot(snap.snapshotId), true)
  assert.equal(await BaseSandbox.deleteSnapshot(snap.snapshotId), false)
  step('createSnapshot, listSnapshots, create from it, deleteSnapshot')

  // runCode on a killed sandbox rejects.
  assert.equal(await child.kill(), true)
  await assert.rejects(child.runCode('1 + 1'))
  step('runCode on a killed sandbox rejects')
} finally {
  for (const s of made) await s.kill().catch(() => {})
}
console.log('TWINS OK')
