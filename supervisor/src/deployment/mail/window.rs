//! How much mail one live child holds: FIFO from the durable inbox, a
//! bounded window in flight, held by that child (its channel id and pid)
//! until it acknowledges.

/// Most mail items in flight to one child at once.
pub const WINDOW: usize = 32;

/// What the dispatcher knows between store calls.
#[derive(Debug)]
pub struct Dispatch {
    in_flight: usize,
    wanted: bool,
}

impl Default for Dispatch {
    fn default() -> Self {
        // A new child may have a backlog waiting.
        Self {
            in_flight: 0,
            wanted: true,
        }
    }
}

impl Dispatch {
    /// Items in flight to the child.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// New mail may be waiting (accepted, acked, or replayed).
    pub fn want(&mut self) {
        self.wanted = true;
    }

    /// How many items to take from the inbox now, if any.
    pub fn to_take(&self) -> Option<usize> {
        (self.wanted && self.in_flight < WINDOW).then(|| WINDOW - self.in_flight)
    }

    /// How many more items the child may be sent, wanted or not.
    pub fn room(&self) -> usize {
        WINDOW.saturating_sub(self.in_flight)
    }

    /// `got` items of `asked` were taken and sent; fewer means the inbox is
    /// empty for now.
    pub fn took(&mut self, got: usize, asked: usize) {
        self.in_flight += got;
        if got < asked {
            self.wanted = false;
        }
    }

    /// One item was acknowledged: room for another.
    pub fn acked(&mut self) {
        self.in_flight = self.in_flight.saturating_sub(1);
        self.wanted = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_bounds_what_is_in_flight() {
        let mut d = Dispatch::default();
        assert_eq!(d.to_take(), Some(WINDOW));
        d.took(WINDOW, WINDOW);
        assert_eq!(d.to_take(), None, "window full");
        d.acked();
        assert_eq!(d.to_take(), Some(1));
        d.took(0, 1);
        assert_eq!(d.to_take(), None, "inbox empty until new mail");
        d.want();
        assert_eq!(d.to_take(), Some(1));
    }
}
