//! Pure decisions with an injected clock. Filled in by the policy work.
