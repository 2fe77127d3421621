//! The console's logins: the book of one-time tokens and sessions
//! (`wfhost_policy::login`, the rules) behind a lock, with the secrets
//! drawn from the OS and hashed before the book sees them, and the
//! console's address once it serves, for the links `console token`
//! prints. Held in memory only: a restart logs everyone out, which is
//! what a supervisor that may have been replaced should do.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::Serialize;
use sha2::{Digest as _, Sha256};
use wfhost_policy::login::{Digest, Logins, Session};

/// Who minted a login (a control-socket client's peer credentials): what
/// the journal says of every action of the sessions it opens.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Who {
    /// The client's uid.
    pub uid: Option<u32>,
    /// Its user name, if the system has one.
    pub user: Option<String>,
}

impl Who {
    /// "ana (uid 1000)", as the CLI's journal records say it.
    pub fn name(&self) -> String {
        match (&self.user, self.uid) {
            (Some(user), Some(uid)) => format!("{user} (uid {uid})"),
            (None, Some(uid)) => format!("uid {uid}"),
            _ => "an operator".into(),
        }
    }
}

/// A session as the console uses it.
pub type Opened = Session<Who>;

/// The console's logins and address.
#[derive(Debug, Default)]
pub struct Door {
    book: Mutex<Logins<Who>>,
    url: Mutex<Option<String>>,
}

/// A new login link.
#[derive(Debug, Clone, Serialize)]
pub struct Minted {
    /// The link that logs in once: the console's address with the token.
    pub url: String,
    /// How long it stays usable.
    pub ttl_ms: u64,
}

/// A fresh secret: 32 bytes from the OS, as 64 hex characters.
pub fn secret() -> Result<String, String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| format!("the OS gave no random bytes: {e}"))?;
    Ok(hex::encode(bytes))
}

/// What the book keeps of a secret.
fn digest(secret: &str) -> Digest {
    Sha256::digest(secret.as_bytes()).into()
}

impl Door {
    /// The console serves at `url` (`http://127.0.0.1:9180`): logins may
    /// be minted.
    pub fn open(&self, url: String) {
        *self.url.lock().unwrap_or_else(|p| p.into_inner()) = Some(url);
    }

    /// Where the console serves, if it does.
    pub fn url(&self) -> Option<String> {
        self.url.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// A one-time login link for `who`, usable for `ttl`; refused while
    /// the console is off.
    pub fn mint(&self, who: Who, ttl: Duration) -> Result<Minted, String> {
        let Some(base) = self.url() else {
            return Err(
                "the console is off: set [console] listen in the config and restart the supervisor"
                    .into(),
            );
        };
        let token = secret()?;
        let now = Instant::now();
        let ends = self.book().mint(digest(&token), who, ttl, now);
        Ok(Minted {
            url: format!("{base}/login?token={token}"),
            ttl_ms: ends.saturating_duration_since(now).as_millis() as u64,
        })
    }

    /// Uses up `token`: the new session's id and the session, or `None`.
    pub fn redeem(&self, token: &str) -> Option<(String, Opened)> {
        let id = secret().ok()?;
        let csrf = secret().ok()?;
        let opened = self
            .book()
            .redeem(&digest(token), digest(&id), csrf, Instant::now())?;
        Some((id, opened))
    }

    /// The session whose id is `id`, while it lasts.
    pub fn session(&self, id: &str) -> Option<Opened> {
        self.book().session(&digest(id), Instant::now())
    }

    /// Ends the session `id`.
    pub fn end(&self, id: &str) {
        self.book().end(&digest(id));
    }

    fn book(&self) -> std::sync::MutexGuard<'_, Logins<Who>> {
        self.book.lock().unwrap_or_else(|p| p.into_inner())
    }
}
