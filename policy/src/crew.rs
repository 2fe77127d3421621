//! A deployment's children (its replicas, each in a *slot* that lives its
//! own [`crate::life::Life`]): how many it keeps, which slot a rolling
//! recycle replaces next, and, with overlap (make-before-break), the
//! successor started and ready before the child it replaces is drained.
//! The crew decides only what spans slots; everything else is each slot's.
//!
//! - A recycle of the deployment is rolling: one slot at a time. Without
//!   overlap the slot recycles in place (drain, stop, respawn), so capacity
//!   dips to N − 1; with overlap a successor slot is added first and the old
//!   one retired once the successor is ready, so capacity never dips below
//!   N and at most one extra child lives at a time.
//! - A recycle of one slot (`DEP/2`, a policy bound, the child's own
//!   request) is a roll of that slot alone.
//! - A roll under way absorbs every later recycle (its waiters join).
//! - A successor that never becomes ready is retired, the old child keeps
//!   serving, and the roll is refused with the reason.
//! - Scaling (a reload changing `replicas`) adds slots or retires the
//!   highest ones, leaving the others untouched.

use std::collections::VecDeque;

use crate::recycle::RecycleCause;

/// Which slots a recycle is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Which {
    /// Every slot, one after another.
    All,
    /// The slot with this index.
    One(u32),
}

/// One slot as the crew knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slot {
    /// Its index (`DEP/INDEX`), never reused.
    pub index: u32,
    /// Being drained for good.
    pub retiring: bool,
    /// Added to replace this slot (an overlapping recycle's successor).
    pub replaces: Option<u32>,
}

/// Something that happened across a deployment's slots.
#[derive(Debug)]
pub enum Input<W> {
    /// A recycle was asked for.
    Recycle {
        /// Which slots.
        which: Which,
        /// Who asked.
        cause: RecycleCause,
        /// Why.
        reason: String,
        /// Who waits for the new pids.
        waiter: Option<W>,
    },
    /// A slot's child became ready (with its pid).
    Ready {
        /// The slot.
        index: u32,
        /// The child's pid.
        pid: u32,
    },
    /// A slot finished an in-place recycle: its new child is ready.
    Recycled {
        /// The slot.
        index: u32,
        /// The new child's pid.
        pid: u32,
    },
    /// A slot refused the recycle it was asked for (a successor could not
    /// start), or an added successor ended before it was ever ready.
    Refused {
        /// The slot.
        index: u32,
        /// Why.
        why: String,
    },
    /// A slot is gone (retired, or stopped for good).
    Ended {
        /// The slot.
        index: u32,
    },
    /// The configured number of replicas (a reload).
    Scale(u32),
}

/// What the driver must do.
#[derive(Debug, PartialEq, Eq)]
pub enum Action<W> {
    /// Add a slot and spawn its child.
    Add {
        /// The new slot.
        index: u32,
    },
    /// Recycle a slot in place.
    Recycle {
        /// The slot.
        index: u32,
        /// Who asked.
        cause: RecycleCause,
        /// Why.
        reason: String,
    },
    /// An overlapping recycle's successor is ready and takes over from
    /// the slot it replaces (which is retired next): the recycle is done
    /// for that slot, to be recorded as such.
    Replaced {
        /// The slot retired.
        old: u32,
        /// Its successor.
        new: u32,
        /// Who asked.
        cause: RecycleCause,
        /// Why.
        reason: String,
    },
    /// Drain and stop a slot for good; it goes once its child has ended.
    Retire {
        /// The slot.
        index: u32,
    },
    /// Answer a waiter: the new pids, or why not.
    Answer {
        /// Who.
        to: W,
        /// The pids of the new children, in the order they came up.
        answer: Result<Vec<u32>, String>,
    },
}

/// The step of a roll under way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// The slot recycles itself.
    InPlace(u32),
    /// A successor was added for `old`; once it is ready `old` retires,
    /// and the roll moves on once `old` has ended.
    Successor { old: u32, new: u32, ready: bool },
}

#[derive(Debug)]
struct Roll<W> {
    cause: RecycleCause,
    reason: String,
    waiters: Vec<W>,
    pending: VecDeque<u32>,
    step: Option<Step>,
    pids: Vec<u32>,
}

/// A deployment's slots.
#[derive(Debug)]
pub struct Crew<W> {
    target: u32,
    overlap: bool,
    slots: Vec<Slot>,
    next: u32,
    roll: Option<Roll<W>>,
    stopping: bool,
}

type Out<W> = Vec<Action<W>>;

impl<W> Crew<W> {
    /// A crew of `replicas` slots (at least one), indexed from 1.
    pub fn new(replicas: u32, overlap: bool) -> (Self, Out<W>) {
        let mut crew = Self {
            target: replicas.max(1),
            overlap,
            slots: Vec::new(),
            next: 1,
            roll: None,
            stopping: false,
        };
        let mut out = Vec::new();
        for _ in 0..crew.target {
            crew.add(None, &mut out);
        }
        (crew, out)
    }

    /// The slots, in index order.
    pub fn slots(&self) -> &[Slot] {
        &self.slots
    }

    /// Whether recycles overlap.
    pub fn overlap(&self) -> bool {
        self.overlap
    }

    /// Applies a reload's settings; returns what scaling takes.
    pub fn reconfigure(&mut self, replicas: u32, overlap: bool) -> Out<W> {
        self.overlap = overlap;
        self.on(Input::Scale(replicas))
    }

    /// The supervisor is stopping: no more slots are added, and a roll
    /// under way is answered.
    pub fn stop(&mut self) -> Out<W> {
        self.stopping = true;
        let mut out = Vec::new();
        if let Some(roll) = self.roll.take() {
            refuse(
                roll.waiters,
                "not recycled: the supervisor is stopping",
                &mut out,
            );
        }
        out
    }

    /// What an input does.
    pub fn on(&mut self, input: Input<W>) -> Out<W> {
        let mut out = Vec::new();
        match input {
            Input::Recycle {
                which,
                cause,
                reason,
                waiter,
            } => self.recycle(which, cause, reason, waiter, &mut out),
            Input::Ready { index, pid } => self.ready(index, pid, &mut out),
            Input::Recycled { index, pid } => {
                if self.step() == Some(Step::InPlace(index)) {
                    self.done_with_step(Some(pid), &mut out);
                }
            }
            Input::Refused { index, why } => self.refused(index, why, &mut out),
            Input::Ended { index } => self.ended(index, &mut out),
            Input::Scale(n) => self.scale(n, &mut out),
        }
        out
    }

    fn step(&self) -> Option<Step> {
        self.roll.as_ref().and_then(|r| r.step)
    }

    fn serving(&self) -> impl Iterator<Item = &Slot> {
        self.slots.iter().filter(|s| !s.retiring)
    }

    fn add(&mut self, replaces: Option<u32>, out: &mut Out<W>) -> u32 {
        let index = self.next;
        self.next = self.next.saturating_add(1);
        self.slots.push(Slot {
            index,
            retiring: false,
            replaces,
        });
        out.push(Action::Add { index });
        index
    }

    fn retire(&mut self, index: u32, out: &mut Out<W>) {
        if let Some(slot) = self.slots.iter_mut().find(|s| s.index == index)
            && !slot.retiring
        {
            slot.retiring = true;
            out.push(Action::Retire { index });
        }
    }

    fn recycle(
        &mut self,
        which: Which,
        cause: RecycleCause,
        reason: String,
        waiter: Option<W>,
        out: &mut Out<W>,
    ) {
        if let Some(roll) = self.roll.as_mut() {
            roll.waiters.extend(waiter);
            return;
        }
        let pending: VecDeque<u32> = match which {
            Which::All => self.serving().map(|s| s.index).collect(),
            Which::One(index) => self
                .serving()
                .filter(|s| s.index == index)
                .map(|s| s.index)
                .collect(),
        };
        if pending.is_empty() || self.stopping {
            if let (Some(to), Which::One(index)) = (waiter, which) {
                let known: Vec<String> = self.serving().map(|s| s.index.to_string()).collect();
                out.push(Action::Answer {
                    to,
                    answer: Err(format!(
                        "no replica {index}; the replicas are {}",
                        known.join(", ")
                    )),
                });
            }
            return;
        }
        self.roll = Some(Roll {
            cause,
            reason,
            waiters: waiter.into_iter().collect(),
            pending,
            step: None,
            pids: Vec::new(),
        });
        self.next_step(out);
    }

    /// Starts the roll's next slot, or answers once every slot is done.
    fn next_step(&mut self, out: &mut Out<W>) {
        let Some(roll) = self.roll.as_mut() else {
            return;
        };
        let Some(old) = roll.pending.pop_front() else {
            if let Some(roll) = self.roll.take() {
                for to in roll.waiters {
                    out.push(Action::Answer {
                        to,
                        answer: Ok(roll.pids.clone()),
                    });
                }
            }
            return;
        };
        let (cause, reason) = (roll.cause, roll.reason.clone());
        if self.overlap {
            let new = self.add(Some(old), out);
            if let Some(roll) = self.roll.as_mut() {
                roll.step = Some(Step::Successor {
                    old,
                    new,
                    ready: false,
                });
            }
        } else {
            roll.step = Some(Step::InPlace(old));
            out.push(Action::Recycle {
                index: old,
                cause,
                reason,
            });
        }
    }

    fn done_with_step(&mut self, pid: Option<u32>, out: &mut Out<W>) {
        if let Some(roll) = self.roll.as_mut() {
            roll.step = None;
            roll.pids.extend(pid);
        }
        self.next_step(out);
    }

    fn ready(&mut self, index: u32, pid: u32, out: &mut Out<W>) {
        if let Some(Step::Successor {
            old,
            new,
            ready: false,
        }) = self.step()
            && new == index
        {
            if let Some(roll) = self.roll.as_mut() {
                roll.step = Some(Step::Successor {
                    old,
                    new,
                    ready: true,
                });
                roll.pids.push(pid);
                out.push(Action::Replaced {
                    old,
                    new,
                    cause: roll.cause,
                    reason: roll.reason.clone(),
                });
            }
            if let Some(slot) = self.slots.iter_mut().find(|s| s.index == new) {
                slot.replaces = None;
            }
            self.retire(old, out);
        }
    }

    fn refused(&mut self, index: u32, why: String, out: &mut Out<W>) {
        let failed = match self.step() {
            Some(Step::InPlace(slot)) => slot == index,
            Some(Step::Successor {
                new, ready: false, ..
            }) => {
                let failed = new == index;
                if failed {
                    self.retire(new, out);
                }
                failed
            }
            _ => false,
        };
        if failed && let Some(roll) = self.roll.take() {
            refuse(roll.waiters, &why, out);
        }
    }

    fn ended(&mut self, index: u32, out: &mut Out<W>) {
        self.slots.retain(|s| s.index != index);
        match self.step() {
            Some(Step::Successor {
                old, ready: true, ..
            }) if old == index => self.done_with_step(None, out),
            // A successor that went before it was ever ready (retired
            // after a refusal, or stopped) ends the roll.
            Some(Step::Successor {
                new, ready: false, ..
            }) if new == index => {
                if let Some(roll) = self.roll.take() {
                    refuse(
                        roll.waiters,
                        "not recycled: the new child ended before it was ready",
                        out,
                    );
                }
            }
            Some(Step::InPlace(slot)) if slot == index => self.done_with_step(None, out),
            _ => {}
        }
        if let Some(roll) = self.roll.as_mut() {
            roll.pending.retain(|&p| p != index);
        }
    }

    fn scale(&mut self, n: u32, out: &mut Out<W>) {
        self.target = n.max(1);
        if self.stopping {
            return;
        }
        let counted: Vec<u32> = self
            .serving()
            .filter(|s| s.replaces.is_none())
            .map(|s| s.index)
            .collect();
        let have = u32::try_from(counted.len()).unwrap_or(u32::MAX);
        if have < self.target {
            for _ in have..self.target {
                self.add(None, out);
            }
        } else {
            let extra = usize::try_from(have.saturating_sub(self.target)).unwrap_or(usize::MAX);
            let busy = match self.step() {
                Some(Step::InPlace(i)) => Some(i),
                Some(Step::Successor { old, .. }) => Some(old),
                None => None,
            };
            // The newest slots go first; one a roll is busy with goes last.
            let mut victims: Vec<u32> = counted;
            victims.sort_by_key(|&i| (Some(i) == busy, std::cmp::Reverse(i)));
            for index in victims.into_iter().take(extra) {
                self.retire(index, out);
                if let Some(roll) = self.roll.as_mut() {
                    roll.pending.retain(|&p| p != index);
                }
            }
        }
    }
}

fn refuse<W>(waiters: Vec<W>, why: &str, out: &mut Out<W>) {
    for to in waiters {
        out.push(Action::Answer {
            to,
            answer: Err(why.to_owned()),
        });
    }
}

#[cfg(test)]
mod tests;
