/**
 * `@wfhost/child`: write wfhost workflow children in TypeScript.
 *
 * ```ts
 * import { connect } from "@wfhost/child";
 * const rt = await connect();
 * await rt.ready();
 * for await (const mail of rt.mail()) {
 *   const run = `mail-${mail.id}`;
 *   await rt.step(run, "fetch", "cancel", (signal) => fetch(url, { signal }));
 *   await rt.runTerminal(run, "succeeded");
 *   await mail.ack("succeeded");
 * }
 * ```
 */

export { connect, Runtime, type ConnectOptions, type GrantsSnapshot, type RuntimeLimits } from "./runtime.js";
export type { CloseReason } from "./core.js";
export type { CustomData } from "./custom.js";
export { Mail } from "./inbox.js";
export type { AckOutcome } from "./mail.js";
export { Step, type StepBehavior, type StepOptions } from "./step.js";
export { Cancelled, ChannelClosed, ConnectError, InvalidEvent, type CancelCause, type CancelOriginName } from "./errors.js";
export { readChildEnv, ENV_VARS, type ChildEnv } from "./env.js";
export { VERSION, DEFAULT_IMPLEMENTATION } from "./version.js";
export { PROTOCOL_VERSION } from "./protocol/messages.js";
