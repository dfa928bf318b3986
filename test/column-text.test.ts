// How the fast path's columns travel as text (persist/column-text.ts); their round trip through
// Postgres' rs_split_column is tested in batch-fast-path.test.ts.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { arrayLiteral, ELEMENT_SEPARATOR, joinedText, NULL_ELEMENT } from '../src/persist/column-text.js';

test('a text column: every element after a separator, NULL as the marker alone, no element: empty', () => {
  assert.equal(joinedText([]), '');
  assert.equal(joinedText(['']), ELEMENT_SEPARATOR, 'one empty element is not no element');
  assert.equal(joinedText(['a', '', 'b "c"']), '\x1ea\x1e\x1eb "c"');
  assert.equal(joinedText([null, 'x', null]), `\x1e${NULL_ELEMENT}\x1ex\x1e${NULL_ELEMENT}`);
});

test('a number or boolean column as an array literal', () => {
  assert.equal(arrayLiteral([]), '{}');
  assert.equal(arrayLiteral([1, 2, 9007199254740991]), '{1,2,9007199254740991}');
  assert.equal(arrayLiteral([true, false, null]), '{true,false,NULL}');
  assert.throws(() => arrayLiteral([1, Number.NaN]), RangeError);
  assert.throws(() => arrayLiteral([Number.POSITIVE_INFINITY]), RangeError);
});
