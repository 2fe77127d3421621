//! A step started by hand: its token, and the report of how it ended.

use std::sync::Arc;

use wfhost_ipc::Outcome;

use crate::error::RuntimeError;
use crate::shared::Shared;
use crate::token::CancelToken;
use crate::work::StepId;

/// A running step. Finish it with [`Step::finish`]; dropping it unfinished
/// reports it `Failed`, so the supervisor never waits on a forgotten step.
#[derive(Debug)]
pub struct Step {
    shared: Arc<Shared>,
    id: StepId,
    run: String,
    token: CancelToken,
    finished: bool,
}

impl Step {
    pub(crate) fn new(shared: Arc<Shared>, id: StepId, run: &str, token: CancelToken) -> Self {
        Self {
            shared,
            id,
            run: run.to_owned(),
            token,
            finished: false,
        }
    }

    /// The run this step belongs to.
    pub fn run(&self) -> &str {
        &self.run
    }

    /// Fires when the step must stop, saying why.
    pub fn token(&self) -> &CancelToken {
        &self.token
    }

    /// Reports how the step ended (`StepFinished`), then `RunTerminal` if
    /// its run was cancelled and this was its last step, then `Drained` if a
    /// drain now has no cancel-behaviour step in flight and no mail held.
    pub async fn finish(self, outcome: Outcome) -> Result<(), RuntimeError> {
        self.end(outcome, None).await
    }

    /// Reports how the step ended and that its run ended with it
    /// (`StepFinished`, `RunTerminal`, then `Drained` if it is due), for a
    /// run that is one step.
    pub async fn finish_run(
        self,
        outcome: Outcome,
        run_outcome: Outcome,
    ) -> Result<(), RuntimeError> {
        self.end(outcome, Some(run_outcome)).await
    }

    async fn end(
        mut self,
        outcome: Outcome,
        run_outcome: Option<Outcome>,
    ) -> Result<(), RuntimeError> {
        self.finished = true;
        let id = self.id;
        self.shared
            .send_all(|work| work.finish(id, outcome, run_outcome))
            .await
    }
}

impl Drop for Step {
    fn drop(&mut self) {
        if !self.finished {
            let mut work = self.shared.work();
            let events = work.finish(
                self.id,
                Outcome::Failed("step dropped before it finished".to_owned()),
                None,
            );
            self.shared.post_all(events);
        }
    }
}
