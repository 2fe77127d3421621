/**
 * The environment through which the supervisor tells a child how to reach
 * it: which fd, which channel, which protocol, which deployment, which key.
 */

import { ConnectError } from "./errors.js";
import { PublicKey } from "./protocol/ed25519.js";
import { PROTOCOL_VERSION } from "./protocol/messages.js";

/** Every `WFHOST_*` variable of the contract. */
export const ENV_VARS = [
  "WFHOST_CONTROL_FD",
  "WFHOST_CHANNEL_ID",
  "WFHOST_PROTOCOL",
  "WFHOST_DEPLOYMENT",
  "WFHOST_SUPERVISOR_KEY",
] as const;

/** Everything a child learns from its environment. */
export interface ChildEnv {
  controlFd: number;
  channelId: string;
  protocol: number;
  deployment: string;
  supervisorKey: PublicKey;
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

/** Reads and checks the `WFHOST_*` variables of `env`. */
export function readChildEnv(env: Record<string, string | undefined>): ChildEnv {
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

  const protoText = get("WFHOST_PROTOCOL");
  if (!/^\s*\d+\s*$/.test(protoText)) {
    throw invalid("WFHOST_PROTOCOL", protoText, "not a version number");
  }
  const protocol = Number(protoText.trim());
  if (protocol !== PROTOCOL_VERSION) {
    throw invalid(
      "WFHOST_PROTOCOL",
      protoText,
      `this child speaks protocol ${PROTOCOL_VERSION}; upgrade the child or the supervisor so they match`,
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
