// Stop strings are edited one per line, with a newline written as `\n` (and `\t`, `\\`).

export function encodeStops(stops: string[]): string {
  return stops
    .map((s) => s.replaceAll('\\', '\\\\').replaceAll('\n', '\\n').replaceAll('\t', '\\t'))
    .join('\n');
}

export function decodeStops(text: string): string[] {
  return text
    .split('\n')
    .filter((l) => l.length > 0)
    .map((l) => l.replace(/\\(n|t|\\)/g, (_, c: string) => (c === 'n' ? '\n' : c === 't' ? '\t' : '\\')));
}
