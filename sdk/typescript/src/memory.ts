/** A bounded memory: the ledgers remember the latest entries, not all of them. */

/**
 * Adds `key` to `map` unless it is there already, then forgets the oldest
 * entries (a Map keeps insertion order) until at most `max` are left.
 */
export function rememberBounded<K, V>(map: Map<K, V>, key: K, value: V, max: number): void {
  if (map.has(key)) return;
  map.set(key, value);
  for (const oldest of map.keys()) {
    if (map.size <= max) return;
    map.delete(oldest);
  }
}
