/**
 * `@wfhost/child`: write wfhost workflow children in TypeScript.
 *
 * ```ts
 * import { connect } from "@wfhost/child";
 * const rt = await connect();
 * await rt.ready();
 * await rt.handleMail(async (mail) => {
 *   const run = `mail-${mail.id}`;
 *   const body = await rt.step(run, "fetch", "cancel", (signal) => fetch(url, { signal }).then((r) => r.json()));
 *   await rt.runTerminal(run, "succeeded");
 *   return body; // the item's result (protocol 3)
 * });
 * ```
 */

export {
  connect,
  Runtime,
  type ConnectOptions,
  type GrantsSnapshot,
  type HandleMailOptions,
  type MailHandler,
  type RuntimeLimits,
} from "./runtime.js";
export type { CloseReason } from "./core.js";
export type { CustomData, MailResult } from "./custom.js";
export { Mail, MAX_ASK_JSON_BYTES, MAX_ASK_KEY_BYTES, type Cancellable, type MailOptions } from "./inbox.js";
export type { AckOutcome } from "./mail.js";
export { Step, type StepBehavior, type StepOptions } from "./step.js";
export {
  Cancelled,
  ChannelClosed,
  ConnectError,
  GivenBackError,
  InvalidEvent,
  type CancelCause,
  type CancelOriginName,
} from "./errors.js";
export { readChildEnv, ENV_VARS, type ChildEnv } from "./env.js";
export { VERSION, DEFAULT_IMPLEMENTATION } from "./version.js";
export { OLDEST_PROTOCOL, PROTOCOL_VERSION } from "./protocol/messages.js";
