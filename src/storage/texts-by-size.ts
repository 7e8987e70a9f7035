/**
 * Multi-row statement texts by their number of rows, each made once. Both drivers find a statement by
 * its text (SQLite's prepared statements, PostgreSQL's split texts in `deferred.ts`): a text made again
 * for every use was a new string, hashed and compared in full there, 16 KB for 64 deliveries and 55 µs
 * (issue 29). Past `maxSizes` sizes, a text is made each time rather than kept.
 */
export function textsBySize(make: (n: number) => string, maxSizes = 256): (n: number) => string {
  const texts = new Map<number, string>();
  return (n) => {
    let text = texts.get(n);
    if (text === undefined) {
      text = make(n);
      if (texts.size < maxSizes) texts.set(n, text);
    }
    return text;
  };
}
