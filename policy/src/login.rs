//! Who may use the console (DESIGN §8, the console): one-time login
//! tokens and the sessions they open, with time passed in.
//!
//! The book holds digests, never the secrets themselves: the supervisor
//! hashes a token or session id before it asks, so a memory dump holds
//! nothing that logs anyone in. A token opens one session and is gone
//! (a link pasted twice, or read from a proxy's log after use, opens
//! nothing); a session lasts [`SESSION_TTL`] from its login, however
//! busy. Both books are bounded, the oldest entry making room, so a
//! flood of `console token` requests or logins cannot grow the
//! supervisor.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// A secret's digest (the supervisor's SHA-256 of it).
pub type Digest = [u8; 32];

/// How long a session lasts from its login.
pub const SESSION_TTL: Duration = Duration::from_secs(12 * 3600);

/// A login token's life when `console token` names none.
pub const TOKEN_TTL: Duration = Duration::from_secs(15 * 60);

/// The longest and shortest life a login token may be given.
pub const MAX_TOKEN_TTL: Duration = Duration::from_secs(24 * 3600);
/// See [`MAX_TOKEN_TTL`].
pub const MIN_TOKEN_TTL: Duration = Duration::from_secs(10);

/// Most login tokens waiting to be used.
pub const MAX_TOKENS: usize = 64;

/// Most sessions open at once.
pub const MAX_SESSIONS: usize = 256;

/// An open session: who logged in, and the token its forms carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session<W> {
    /// Who minted the login link (what the journal says of its actions).
    pub who: W,
    /// The session's CSRF token, sent back in every state-changing form.
    pub csrf: String,
    /// When it ends.
    pub expires: Instant,
}

/// A token not yet used.
#[derive(Debug, Clone)]
struct Pending<W> {
    who: W,
    expires: Instant,
}

/// The login tokens and sessions of one supervisor.
#[derive(Debug)]
pub struct Logins<W> {
    tokens: HashMap<Digest, Pending<W>>,
    sessions: HashMap<Digest, Session<W>>,
}

impl<W> Default for Logins<W> {
    fn default() -> Self {
        Self {
            tokens: HashMap::new(),
            sessions: HashMap::new(),
        }
    }
}

impl<W: Clone> Logins<W> {
    /// Keeps a new token for `who`, valid for `ttl` (held to
    /// [`MIN_TOKEN_TTL`]..=[`MAX_TOKEN_TTL`]); returns when it ends.
    pub fn mint(&mut self, token: Digest, who: W, ttl: Duration, now: Instant) -> Instant {
        self.prune(now);
        let ttl = ttl.clamp(MIN_TOKEN_TTL, MAX_TOKEN_TTL);
        if self.tokens.len() >= MAX_TOKENS
            && let Some(oldest) = oldest(self.tokens.iter().map(|(k, p)| (k, p.expires)))
        {
            self.tokens.remove(&oldest);
        }
        let expires = now.checked_add(ttl).unwrap_or(now);
        self.tokens.insert(token, Pending { who, expires });
        expires
    }

    /// Uses up `token`, opening session `session` with `csrf`; `None` if
    /// the token is unknown, used or expired.
    pub fn redeem(
        &mut self,
        token: &Digest,
        session: Digest,
        csrf: String,
        now: Instant,
    ) -> Option<Session<W>> {
        self.prune(now);
        let pending = self.tokens.remove(token)?;
        if self.sessions.len() >= MAX_SESSIONS
            && let Some(oldest) = oldest(self.sessions.iter().map(|(k, s)| (k, s.expires)))
        {
            self.sessions.remove(&oldest);
        }
        let opened = Session {
            who: pending.who,
            csrf,
            expires: now.checked_add(SESSION_TTL).unwrap_or(now),
        };
        self.sessions.insert(session, opened.clone());
        Some(opened)
    }

    /// The open session `session`, if it has not ended.
    pub fn session(&mut self, session: &Digest, now: Instant) -> Option<Session<W>> {
        self.prune(now);
        self.sessions.get(session).cloned()
    }

    /// Ends session `session` (a logout).
    pub fn end(&mut self, session: &Digest) {
        self.sessions.remove(session);
    }

    /// How many tokens wait and how many sessions are open.
    pub fn counts(&self) -> (usize, usize) {
        (self.tokens.len(), self.sessions.len())
    }

    /// Forgets what has expired.
    fn prune(&mut self, now: Instant) {
        self.tokens.retain(|_, p| p.expires > now);
        self.sessions.retain(|_, s| s.expires > now);
    }
}

/// The key of the entry that ends first.
fn oldest<'a>(entries: impl Iterator<Item = (&'a Digest, Instant)>) -> Option<Digest> {
    entries.min_by_key(|(_, at)| *at).map(|(k, _)| *k)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(n: u8) -> Digest {
        [n; 32]
    }

    #[test]
    fn a_token_opens_one_session_and_is_gone() {
        let mut book = Logins::default();
        let t0 = Instant::now();
        book.mint(d(1), "ana", Duration::from_secs(60), t0);
        let s = book.redeem(&d(1), d(2), "c".into(), t0).unwrap();
        assert_eq!(s.who, "ana");
        assert_eq!(book.redeem(&d(1), d(3), "c".into(), t0), None);
        assert_eq!(book.session(&d(2), t0).unwrap().csrf, "c");
        assert_eq!(book.session(&d(3), t0), None);
    }

    #[test]
    fn tokens_and_sessions_expire() {
        let mut book = Logins::default();
        let t0 = Instant::now();
        book.mint(d(1), "ana", Duration::from_secs(60), t0);
        assert_eq!(
            book.redeem(&d(1), d(2), "c".into(), t0 + Duration::from_secs(61)),
            None
        );
        book.mint(d(1), "ana", Duration::from_secs(60), t0);
        book.redeem(&d(1), d(2), "c".into(), t0).unwrap();
        assert!(
            book.session(&d(2), t0 + SESSION_TTL - Duration::from_secs(1))
                .is_some()
        );
        assert_eq!(book.session(&d(2), t0 + SESSION_TTL), None);
    }

    #[test]
    fn a_ttl_is_held_to_its_bounds() {
        let mut book: Logins<&str> = Logins::default();
        let t0 = Instant::now();
        assert_eq!(book.mint(d(1), "a", Duration::ZERO, t0), t0 + MIN_TOKEN_TTL);
        assert_eq!(book.mint(d(2), "a", Duration::MAX, t0), t0 + MAX_TOKEN_TTL);
    }

    #[test]
    fn the_books_are_bounded_the_oldest_making_room() {
        let mut book = Logins::default();
        let t0 = Instant::now();
        for i in 0..=MAX_TOKENS as u8 {
            book.mint(d(i), "a", MIN_TOKEN_TTL + Duration::from_secs(i.into()), t0);
        }
        assert_eq!(book.counts().0, MAX_TOKENS);
        assert_eq!(book.redeem(&d(0), d(200), "c".into(), t0), None);
        assert!(book.redeem(&d(1), d(201), "c".into(), t0).is_some());
        book.end(&d(201));
        assert_eq!(book.session(&d(201), t0), None);
    }
}
