import { describe, expect, it } from 'vitest';
import { fmtUptime, isFormError, parseServerForm } from './server';

describe('parseServerForm', () => {
  it('accepts what server_start takes', () => {
    expect(parseServerForm('0', '', '1')).toEqual({ port: 0, apiKey: null, parallel: 1 });
    expect(parseServerForm(' 65535 ', ' sk-1 ', '64')).toEqual({ port: 65535, apiKey: 'sk-1', parallel: 64 });
  });

  it('names the field that is wrong', () => {
    const cases: [string, string, string, string][] = [
      ['65536', '', '4', 'not a port'],
      ['-1', '', '4', 'not a port'],
      ['80.5', '', '4', 'not a port'],
      ['', '', '4', 'not a port'],
      ['8080', '', '65', 'Parallel'],
      ['8080', '', 'x', 'Parallel'],
      ['8080', 'a b', '4', 'printable ASCII'],
      ['8080', 'clé', '4', 'printable ASCII'],
    ];
    for (const [port, key, parallel, needle] of cases) {
      const f = parseServerForm(port, key, parallel);
      expect(isFormError(f), `${port} ${key} ${parallel}`).toBe(true);
      if (isFormError(f)) {
        expect(f.code).toBe('bad_request');
        expect(f.message).toContain(needle);
      }
    }
  });
});

describe('fmtUptime', () => {
  it('writes seconds, minutes and hours', () => {
    expect(fmtUptime(12.7)).toBe('12 s');
    expect(fmtUptime(185)).toBe('3 min 05 s');
    expect(fmtUptime(3720)).toBe('1 h 02 min');
    expect(fmtUptime(Number.NaN)).toBe('–');
  });
});
