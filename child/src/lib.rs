//! Child-side runtime. Filled in by the lifecycle work.
