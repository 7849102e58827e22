import { describe, expect, it } from 'vitest';
import { decodeStops, encodeStops } from './stops';

describe('stop strings', () => {
  it('newlines are edited as \\n and come back', () => {
    expect(encodeStops(['\n\n', 'User:'])).toBe('\\n\\n\nUser:');
    expect(decodeStops('\\n\\n\nUser:\n')).toEqual(['\n\n', 'User:']);
  });

  it('round-trips tabs and backslashes', () => {
    const stops = ['a\\nb', '\t', 'x\\'];
    expect(decodeStops(encodeStops(stops))).toEqual(stops);
  });
});
