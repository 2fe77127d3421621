//! Which replica gets how much of the inbox: each item, in FIFO order, to
//! the replica with the fewest items in hand (ties: the lowest index), as
//! far as each one's window has room. A burst of three items for three
//! idle replicas gives each one, rather than all three to whoever asked
//! first, which is what CPU-bound Node and Python workers need.

/// One replica that may take mail now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hand {
    /// Which (an index into the caller's list).
    pub who: usize,
    /// Items it holds.
    pub held: usize,
    /// Items it may still take.
    pub room: usize,
}

/// How many of `waiting` items each hand takes, in the order to take
/// them (the first to get an item first); hands that get none are left
/// out.
pub fn plan(waiting: u64, hands: &[Hand]) -> Vec<(usize, usize)> {
    let mut given = vec![0usize; hands.len()];
    let mut order: Vec<usize> = Vec::new();
    let total_room: usize = hands.iter().map(|h| h.room).sum();
    let n = usize::try_from(waiting)
        .unwrap_or(usize::MAX)
        .min(total_room);
    for _ in 0..n {
        let next = hands
            .iter()
            .zip(&given)
            .enumerate()
            .filter(|(_, (h, g))| **g < h.room)
            .min_by_key(|(i, (h, g))| (h.held.saturating_add(**g), *i))
            .map(|(i, _)| i);
        let Some(i) = next else { break };
        if let Some(g) = given.get_mut(i) {
            if *g == 0 {
                order.push(i);
            }
            *g += 1;
        }
    }
    order
        .into_iter()
        .filter_map(|i| Some((hands.get(i)?.who, *given.get(i)?)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hand(who: usize, held: usize, room: usize) -> Hand {
        Hand { who, held, room }
    }

    #[test]
    fn a_small_burst_is_spread_one_each() {
        let hands = [hand(0, 0, 32), hand(1, 0, 32), hand(2, 0, 32)];
        assert_eq!(plan(3, &hands), [(0, 1), (1, 1), (2, 1)]);
        assert_eq!(plan(2, &hands), [(0, 1), (1, 1)]);
    }

    #[test]
    fn the_least_loaded_fill_up_first() {
        let hands = [hand(0, 5, 27), hand(1, 0, 32), hand(2, 2, 30)];
        // 1 gets two to reach 2, then 1 and 2 alternate (ties to the
        // lower index) up to 5, then all three.
        assert_eq!(plan(7, &hands), [(1, 5), (2, 2)]);
        assert_eq!(plan(10, &hands), [(1, 6), (2, 3), (0, 1)]);
    }

    #[test]
    fn windows_bound_what_is_taken() {
        let hands = [hand(0, 31, 1), hand(1, 30, 2)];
        assert_eq!(plan(100, &hands), [(1, 2), (0, 1)]);
        assert!(plan(0, &hands).is_empty());
        assert!(plan(5, &[]).is_empty());
    }
}
