// The acceptance script of issue 10 through the unmodified E2B JavaScript SDKs (`e2b` and
// `@e2b/code-interpreter`, exact versions in package.json), the same steps as the Python
// acceptance test: configured only by E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY.
//
// Run by sdk/python/tests/test_e2b_js.py against a live `sandlot serve`; by hand:
//   E2B_API_URL=http://127.0.0.1:PORT E2B_SANDBOX_URL=http://127.0.0.1:PORT \
//   E2B_API_KEY=$(cat DATA_DIR/e2b-api-key) node acceptance.mjs
// Prints one line per step and "ACCEPTANCE OK" at the end; exits non-zero on a failure.

import assert from 'node:assert/strict'
import { Sandbox } from '@e2b/code-interpreter'
import { CommandExitError, Sandbox as BaseSandbox } from 'e2b'

for (const name of ['E2B_API_URL', 'E2B_SANDBOX_URL', 'E2B_API_KEY']) {
  if (!process.env[name]) {
    console.error(`set ${name}`)
    process.exit(2)
  }
}

const PNG_MAGIC = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])

function step(name) {
  console.log(`ok - ${name}`)
}

const sbx = await Sandbox.create({ timeoutMs: 120_000 })
let killed = false
try {
  assert.ok(sbx.sandboxId)
  assert.equal(await sbx.isRunning(), true)
  step('create')

  const first = await sbx.runCode('x = 1')
  assert.equal(first.error, undefined, JSON.stringify(first.error))
  assert.equal((await sbx.runCode('x + 1')).text, '2')
  step('runCode keeps state')

  const js = await sbx.runCode("const who = 'node'; console.log(`hello from ${who}`)", { language: 'js' })
  assert.equal(js.error, undefined, JSON.stringify(js.error))
  assert.deepEqual(js.logs.stdout, ['hello from node\n'])
  assert.equal((await sbx.runCode('await Promise.resolve(who.length)', { language: 'javascript' })).text, '4')
  const tsContext = await sbx.createCodeContext({ language: 'typescript' })
  assert.equal((await sbx.runCode('const n: number = 2; n * 21', { context: tsContext })).text, '42')
  step('runCode runs JavaScript and TypeScript')

  const df = await sbx.runCode("import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': [3, 4]})")
  assert.equal(df.error, undefined, JSON.stringify(df.error))
  assert.ok(df.results[0]?.html?.includes('<table'), 'a DataFrame has .html')
  step('DataFrame html')

  const fig = await sbx.runCode(
    // The interpreter's inline backend shows figures (switching to Agg would show none,
    // on E2B as here).
    'import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()',
  )
  assert.equal(fig.error, undefined, JSON.stringify(fig.error))
  const png = fig.results.map((r) => r.png).find(Boolean)
  assert.ok(png, `a figure has .png: ${JSON.stringify(fig.results.map((r) => Object.keys(r.raw)))} ${JSON.stringify(fig.logs)}`)
  assert.ok(Buffer.from(png, 'base64').subarray(0, 8).equals(PNG_MAGIC))
  step('matplotlib png')

  const info = await sbx.files.write('/home/user/hello.txt', 'hello from e2b js')
  assert.equal(info.path, '/home/user/hello.txt')
  assert.equal(await sbx.files.read('/home/user/hello.txt'), 'hello from e2b js')
  assert.equal((await sbx.runCode("open('hello.txt').read()")).text, 'hello from e2b js')
  step('files.write/read under /home/user')

  const names = (await sbx.files.list('/home/user')).map((e) => e.name)
  assert.ok(names.includes('hello.txt'), JSON.stringify(names))
  assert.equal(await sbx.files.makeDir('/home/user/dir'), true)
  assert.equal(await sbx.files.exists('/home/user/dir'), true)
  await sbx.files.rename('/home/user/hello.txt', '/home/user/dir/hello.txt')
  assert.equal((await sbx.files.getInfo('/home/user/dir/hello.txt')).name, 'hello.txt')
  await sbx.files.remove('/home/user/dir')
  assert.equal(await sbx.files.exists('/home/user/dir'), false)
  step('files.list/makeDir/rename/getInfo/remove')

  const r = await sbx.commands.run('echo hello')
  assert.equal(r.stdout, 'hello\n')
  assert.equal(r.exitCode, 0)
  step('commands.run stdout')

  await assert.rejects(sbx.commands.run('echo bad >&2; exit 3'), (err) => {
    assert.ok(err instanceof CommandExitError, `${err?.constructor?.name}: ${err}`)
    assert.equal(err.exitCode, 3)
    assert.equal(err.stderr, 'bad\n')
    return true
  })
  step('non-zero exit throws CommandExitError')

  const bg = await sbx.commands.run('sleep 60', { background: true })
  assert.ok((await sbx.commands.list()).some((p) => p.pid === bg.pid))
  assert.equal(await sbx.commands.kill(bg.pid), true)
  await assert.rejects(bg.wait(), CommandExitError)
  assert.equal(await sbx.commands.kill(bg.pid), false)
  step('background command killed')

  const ctx = await sbx.createCodeContext()
  await sbx.runCode("y = 'in context'", { context: ctx })
  assert.equal((await sbx.runCode('y', { context: ctx })).text, 'in context')
  assert.equal((await sbx.runCode("'y' in globals()")).text, 'False')
  step('createCodeContext')

  await sbx.setTimeout(300_000)
  const got = await sbx.getInfo()
  assert.ok(new Date(got.endAt).getTime() > Date.now() + 200_000, `endAt ${got.endAt}`)
  step('setTimeout')

  const listed = []
  const paginator = Sandbox.list()
  while (paginator.hasNext) {
    listed.push(...(await paginator.nextItems()).map((s) => s.sandboxId))
  }
  assert.ok(listed.includes(sbx.sandboxId), JSON.stringify(listed))
  step('Sandbox.list')

  assert.equal(await sbx.kill(), true)
  killed = true
  assert.equal(await BaseSandbox.kill(sbx.sandboxId), false)
  step('kill')
} finally {
  if (!killed) await sbx.kill().catch(() => {})
}
console.log('ACCEPTANCE OK')
