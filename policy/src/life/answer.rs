//! The machine's words to operators: answers and refusals.

use super::*;

impl<W> Life<W> {
    pub(super) fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.pid)
    }

    pub(super) fn say(&self, to: W, said: String, o: &mut Out<W>) {
        o.push(Action::Answer {
            to,
            answer: Ok(Answer::Said(said)),
        });
    }

    pub(super) fn refuse(&self, to: W, why: String, o: &mut Out<W>) {
        o.push(Action::Answer {
            to,
            answer: Err(why),
        });
    }

    pub(super) fn refuse_all(&self, waiters: Vec<W>, why: &str, o: &mut Out<W>) {
        for to in waiters {
            self.refuse(to, why.to_owned(), o);
        }
    }

    /// "X is STATE; try again once it is ready".
    pub(super) fn busy(&self, state: &str) -> String {
        format!("{} is {state}; try again once it is ready", self.id)
    }

    /// [`Self::busy`] in the words of the current phase.
    pub(super) fn busy_here(&self) -> String {
        let id = &self.id;
        match &self.phase {
            Phase::Backoff { .. } => self.busy("waiting to restart after a crash"),
            Phase::Drained { .. } | Phase::Failed => self.busy(&format!(
                "{}; `wfhost resume {id}` starts a fresh child",
                self.phase.name()
            )),
            Phase::Exited => self.busy("stopped"),
            Phase::Starting { .. } => self.busy("starting"),
            Phase::Ready { .. }
            | Phase::Draining { .. }
            | Phase::Stopping { .. }
            | Phase::Closing { .. } => self.busy("stopping"),
        }
    }
}
