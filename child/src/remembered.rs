//! A bounded memory of what was settled (acknowledged mail, cancelled
//! runs), so a late repeat is answered as before without the memory growing
//! for as long as the child lives. Shared by the runtime's ledgers and the
//! exec shim's; plain data, nothing of the async runtime.

use std::borrow::Borrow;
use std::collections::{HashMap, VecDeque};
use std::hash::Hash;

/// The last `CAP` keys inserted, each with its value; the oldest is
/// forgotten first.
#[derive(Debug)]
pub struct Remembered<K, V, const CAP: usize> {
    values: HashMap<K, V>,
    order: VecDeque<K>,
}

impl<K, V, const CAP: usize> Default for Remembered<K, V, CAP> {
    fn default() -> Self {
        Self {
            values: HashMap::new(),
            order: VecDeque::new(),
        }
    }
}

impl<K: Eq + Hash + Clone, V, const CAP: usize> Remembered<K, V, CAP> {
    /// Remembers `value` for `key`; a key already remembered keeps its place
    /// and takes the new value. Forgets the oldest keys beyond `CAP`.
    pub fn insert(&mut self, key: K, value: V) {
        if self.values.insert(key.clone(), value).is_none() {
            self.order.push_back(key);
            while self.order.len() > CAP {
                if let Some(old) = self.order.pop_front() {
                    self.values.remove(&old);
                }
            }
        }
    }

    /// What is remembered for `key`.
    pub fn get<Q: Hash + Eq + ?Sized>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
    {
        self.values.get(key)
    }

    /// Whether `key` is remembered.
    pub fn contains<Q: Hash + Eq + ?Sized>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
    {
        self.values.contains_key(key)
    }

    /// How many keys are remembered.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forgets_the_oldest_beyond_its_bound_and_keeps_a_repeat_in_place() {
        let mut r = Remembered::<u64, &str, 2>::default();
        r.insert(1, "a");
        r.insert(2, "b");
        r.insert(1, "c");
        assert_eq!(r.get(&1), Some(&"c"));
        r.insert(3, "d");
        assert!(!r.contains(&1), "1 was the oldest");
        assert!(r.contains(&2) && r.contains(&3));
        assert_eq!(r.len(), 2);
    }
}
