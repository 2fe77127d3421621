/** This package's version (kept equal to package.json's by a test). */
export const VERSION = "0.1.0";

/** The implementation name a child sends in Hello unless told otherwise. */
export const DEFAULT_IMPLEMENTATION = `@wfhost/child/${VERSION}`;
