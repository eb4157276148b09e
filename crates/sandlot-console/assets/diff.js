// A line diff of two texts: the common head and tail are set aside, and the lines between are
// matched by a longest common subsequence, bounded (past MAX_CELLS the middle is shown as all
// removed then all added, which is still a correct diff, only not the shortest).

export const MAX_CELLS = 4_000_000;

/** [{op: ' ' | '-' | '+', line}] turning `a` into `b`. */
export function lineDiff(a, b) {
  const x = a.split('\n');
  const y = b.split('\n');
  let head = 0;
  while (head < x.length && head < y.length && x[head] === y[head]) head++;
  let tail = 0;
  while (tail < x.length - head && tail < y.length - head
    && x[x.length - 1 - tail] === y[y.length - 1 - tail]) tail++;
  const out = x.slice(0, head).map((line) => ({ op: ' ', line }));
  const xs = x.slice(head, x.length - tail);
  const ys = y.slice(head, y.length - tail);
  out.push(...middle(xs, ys));
  out.push(...x.slice(x.length - tail).map((line) => ({ op: ' ', line })));
  return out;
}

function middle(xs, ys) {
  const n = xs.length;
  const m = ys.length;
  if (n === 0 || m === 0 || n * m > MAX_CELLS) {
    return [...xs.map((line) => ({ op: '-', line })), ...ys.map((line) => ({ op: '+', line }))];
  }
  // lcs[i][j]: the LCS length of xs[i..] and ys[j..], one flat array.
  const w = m + 1;
  const lcs = new Uint32Array((n + 1) * w);
  for (let i = n - 1; i >= 0; i--) {
    for (let j = m - 1; j >= 0; j--) {
      lcs[i * w + j] = xs[i] === ys[j]
        ? lcs[(i + 1) * w + j + 1] + 1
        : Math.max(lcs[(i + 1) * w + j], lcs[i * w + j + 1]);
    }
  }
  const out = [];
  let i = 0;
  let j = 0;
  while (i < n && j < m) {
    if (xs[i] === ys[j]) {
      out.push({ op: ' ', line: xs[i] });
      i++;
      j++;
    } else if (lcs[(i + 1) * w + j] >= lcs[i * w + j + 1]) {
      out.push({ op: '-', line: xs[i++] });
    } else {
      out.push({ op: '+', line: ys[j++] });
    }
  }
  while (i < n) out.push({ op: '-', line: xs[i++] });
  while (j < m) out.push({ op: '+', line: ys[j++] });
  return out;
}
