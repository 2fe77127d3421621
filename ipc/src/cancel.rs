//! The cancel request: the one record the supervisor sends a child that the
//! child must not act on without verifying.

use ed25519_dalek::VerifyingKey;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::signed::{Canonical, Signable, SignatureError, Signed};

/// Who asked for the cancel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CancelOrigin {
    /// A drain budget ran out.
    SupervisorDrain,
    /// An operator ran `wfhost cancel` (or `wfhost mail cancel`).
    Operator,
    /// Protocol 3: a mail item's deadline passed (only ever in a
    /// `CancelMail`).
    Deadline,
}

impl CancelOrigin {
    /// The name used in the journal and the CLI.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::SupervisorDrain => "supervisor-drain",
            Self::Operator => "operator",
            Self::Deadline => "deadline",
        }
    }
}

/// A request to cancel one run (or every run) of one deployment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CancelRequested {
    /// Who asked.
    pub origin: CancelOrigin,
    /// The deployment it is meant for.
    pub deployment: String,
    /// The run to cancel; `None` cancels every run of the deployment.
    pub run: Option<String>,
    /// Why, for the journal and the child's log.
    pub reason: String,
    /// Unix time in milliseconds when it was issued.
    pub at_ms: u64,
}

impl Signable for CancelRequested {
    const DOMAIN: &'static str = "wfhost/cancel/v1";

    fn write_canonical(&self, out: &mut Canonical) {
        out.str(self.origin.as_str())
            .str(&self.deployment)
            .opt_str(self.run.as_deref())
            .str(&self.reason)
            .u64(self.at_ms);
    }
}

/// A cancel request as it travels: signed by the supervisor.
pub type SignedCancel = Signed<CancelRequested>;

/// Protocol 3: a request to cancel one mail item of one deployment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MailCancelRequested {
    /// Who asked.
    pub origin: CancelOrigin,
    /// The deployment it is meant for.
    pub deployment: String,
    /// The item to cancel.
    pub id: u64,
    /// Why, for the journal and the child's log.
    pub reason: String,
    /// Unix time in milliseconds when it was issued.
    pub at_ms: u64,
}

impl Signable for MailCancelRequested {
    const DOMAIN: &'static str = "wfhost/cancel-mail/v1";

    fn write_canonical(&self, out: &mut Canonical) {
        out.str(self.origin.as_str())
            .str(&self.deployment)
            .u64(self.id)
            .str(&self.reason)
            .u64(self.at_ms);
    }
}

/// A cancel of one mail item as it travels: signed by the supervisor.
pub type SignedMailCancel = Signed<MailCancelRequested>;

impl SignedMailCancel {
    /// Verifies the signature, then that the cancel is meant for
    /// `deployment` and names an item `holds` accepts.
    pub fn verify_for(
        &self,
        trusted: &VerifyingKey,
        deployment: &str,
        holds: impl Fn(u64) -> bool,
    ) -> Result<(), CancelRefused> {
        self.verify(trusted)?;
        if self.record.deployment != deployment {
            return Err(CancelRefused::WrongDeployment {
                expected: deployment.to_owned(),
                got: self.record.deployment.clone(),
            });
        }
        if !holds(self.record.id) {
            return Err(CancelRefused::UnknownItem {
                got: self.record.id,
            });
        }
        Ok(())
    }
}

/// Why a child refused a cancel.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CancelRefused {
    /// The signature is bad or from an unknown key.
    #[error("{0}")]
    Signature(#[from] SignatureError),
    /// The cancel names another deployment.
    #[error("cancel is for deployment {got:?}, this is {expected:?}")]
    WrongDeployment { expected: String, got: String },
    /// The cancel names a run this child does not have.
    #[error("cancel is for run {got:?}, which this child does not know")]
    UnknownRun { got: String },
    /// The cancel names a mail item this child does not hold.
    #[error("cancel is for mail item {got}, which this child does not hold")]
    UnknownItem { got: u64 },
}

impl SignedCancel {
    /// Verifies the signature, then that the cancel is meant for
    /// `deployment` and, when it names a run, that `knows_run` accepts it.
    pub fn verify_for(
        &self,
        trusted: &VerifyingKey,
        deployment: &str,
        knows_run: impl Fn(&str) -> bool,
    ) -> Result<(), CancelRefused> {
        self.verify(trusted)?;
        if self.record.deployment != deployment {
            return Err(CancelRefused::WrongDeployment {
                expected: deployment.to_owned(),
                got: self.record.deployment.clone(),
            });
        }
        if let Some(run) = &self.record.run
            && !knows_run(run)
        {
            return Err(CancelRefused::UnknownRun { got: run.clone() });
        }
        Ok(())
    }
}
