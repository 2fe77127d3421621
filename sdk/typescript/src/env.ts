/**
 * The environment through which the supervisor tells a child how to reach
 * it: which fd, which channel, which protocol, which deployment, which key.
 */

import { ConnectError } from "./errors.js";
import { PublicKey } from "./protocol/ed25519.js";
import { OLDEST_PROTOCOL, PROTOCOL_VERSION } from "./protocol/messages.js";

/**
 * Every `WFHOST_*` variable of the contract that a child removes from the
 * environment of the programs it starts (`WFHOST_ORIGIN` stays).
 */
export const ENV_VARS = [
  "WFHOST_CONTROL_FD",
  "WFHOST_CHANNEL_ID",
  "WFHOST_PROTOCOL",
  "WFHOST_PROTOCOL_MAX",
  "WFHOST_DEPLOYMENT",
  "WFHOST_SUPERVISOR_KEY",
] as const;

/** Everything a child learns from its environment. */
export interface ChildEnv {
  controlFd: number;
  channelId: string;
  /**
   * The protocol version this child speaks: the newest it implements between
   * `WFHOST_PROTOCOL` and `WFHOST_PROTOCOL_MAX` (or `WFHOST_PROTOCOL` alone).
   */
  protocol: number;
  deployment: string;
  supervisorKey: PublicKey;
}

/**
 * The newest version this package speaks within the supervisor's range
 * `[oldest, newest]`, or null when there is none.
 */
export function negotiate(oldest: number, newest: number): number | null {
  // Every version from the oldest to the newest this package knows is implemented.
  const v = Math.min(newest, PROTOCOL_VERSION);
  return v >= Math.max(oldest, OLDEST_PROTOCOL) ? v : null;
}

function missing(name: string): ConnectError {
  return new ConnectError(
    `${name} is not set: this process must be started by the wfhost supervisor (\`wfhost supervise\`), which passes the control channel`,
  );
}

function invalid(name: string, value: string, reason: string): ConnectError {
  return new ConnectError(
    `${name}=${JSON.stringify(value)} is unusable: ${reason}; it is set by \`wfhost supervise\`, do not set it by hand`,
  );
}

/**
 * Reads and checks the `WFHOST_*` variables of `env`, and picks the
 * protocol version: the newest this package speaks, up to `newestWanted`
 * (default: the newest it knows), within the supervisor's range.
 */
export function readChildEnv(env: Record<string, string | undefined>, newestWanted: number = PROTOCOL_VERSION): ChildEnv {
  const get = (name: string): string => {
    const v = env[name];
    if (v === undefined) throw missing(name);
    return v;
  };

  const fdText = get("WFHOST_CONTROL_FD");
  const controlFd = /^\s*\d+\s*$/.test(fdText) ? Number(fdText.trim()) : NaN;
  if (!Number.isSafeInteger(controlFd) || controlFd <= 2) {
    throw invalid("WFHOST_CONTROL_FD", fdText, "expected an fd number above 2");
  }

  const channelId = get("WFHOST_CHANNEL_ID");
  if (!/^[0-9a-fA-F]{32}$/.test(channelId)) {
    throw invalid("WFHOST_CHANNEL_ID", channelId, "expected 32 hex characters");
  }

  const version = (name: string, text: string): number => {
    const n = /^\s*\d+\s*$/.test(text) ? Number(text.trim()) : NaN;
    if (!Number.isSafeInteger(n)) throw invalid(name, text, "not a version number");
    return n;
  };
  const protoText = get("WFHOST_PROTOCOL");
  const oldest = version("WFHOST_PROTOCOL", protoText);
  const maxText = env["WFHOST_PROTOCOL_MAX"];
  const newest = maxText === undefined ? oldest : version("WFHOST_PROTOCOL_MAX", maxText);
  const top = Math.min(newestWanted, PROTOCOL_VERSION);
  const protocol = negotiate(oldest, Math.min(newest, top));
  if (protocol === null) {
    const range =
      maxText === undefined
        ? `WFHOST_PROTOCOL=${JSON.stringify(protoText)} (and no WFHOST_PROTOCOL_MAX) says the supervisor speaks protocol ${oldest}`
        : `WFHOST_PROTOCOL=${JSON.stringify(protoText)} and WFHOST_PROTOCOL_MAX=${JSON.stringify(maxText)} say the supervisor speaks protocol ${oldest} to ${newest}`;
    throw new ConnectError(
      `${range}, but this child speaks protocol ${top > OLDEST_PROTOCOL ? `${OLDEST_PROTOCOL} to ${top}` : OLDEST_PROTOCOL}: no version in common; upgrade the child's @wfhost/child or the supervisor so they share one`,
    );
  }

  const deployment = get("WFHOST_DEPLOYMENT");
  if (deployment.trim() === "") throw invalid("WFHOST_DEPLOYMENT", deployment, "the deployment id is empty");

  const keyText = get("WFHOST_SUPERVISOR_KEY");
  let supervisorKey: PublicKey;
  try {
    supervisorKey = PublicKey.fromHex(keyText);
  } catch (e) {
    throw invalid("WFHOST_SUPERVISOR_KEY", keyText, `not a hex ed25519 public key (${(e as Error).message})`);
  }
  return { controlFd, channelId, protocol, deployment, supervisorKey };
}
