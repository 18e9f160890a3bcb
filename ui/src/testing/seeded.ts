/** A seeded generator of numbers in [0, 1): the same sequence on every run, so a test over
 * random graphs fails the same way each time. */
export function seeded(seed: number): () => number {
  return () => (seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648;
}
