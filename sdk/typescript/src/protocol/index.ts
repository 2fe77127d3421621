/**
 * `@wfhost/child/protocol`: the wire protocol on its own (codec, framing,
 * signed cancels), for tools and tests that speak it without the runtime.
 */

export { DecodeError, EncodeError, Reader, Writer } from "./bincode.js";
export * from "./messages.js";
export {
  DEFAULT_MAX_FRAME_BYTES,
  FrameDecoder,
  HEADER_BYTES,
  MAX_FRAME_LIMIT,
  ProtocolViolation,
  SeqTracker,
  appendEventFrame,
  decodeOne,
  encodeControlFrame,
  encodeEventFrame,
  type Frame,
  type ViolationKind,
} from "./frame.js";
export { PublicKey, SMALL_ORDER_ENCODINGS, isCanonicalScalar, isSmallOrder } from "./ed25519.js";
export {
  CANCEL_DOMAIN,
  MAIL_CANCEL_DOMAIN,
  cancelSigningBytes,
  mailCancelSigningBytes,
  originName,
  verifyCancel,
  verifyMailCancel,
  type CancelRefusal,
  type Refused,
} from "./cancel.js";
