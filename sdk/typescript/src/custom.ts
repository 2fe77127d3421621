/**
 * The data of an application event (`rt.custom(kind, data)`): bytes as
 * they are, a string as UTF-8, any other JSON value JSON-encoded. Anything
 * else is refused with a TypeError before anything is sent.
 */

/**
 * What `rt.custom` carries: bytes (`Uint8Array`, `Buffer`), a string (sent
 * as UTF-8), or a JSON value (an object, array, number, boolean or null,
 * sent as `JSON.stringify` encodes it).
 */
export type CustomData = Uint8Array | string | number | boolean | null | object;

const ACCEPTED =
  "bytes (a Uint8Array or Buffer), a string (sent as UTF-8), or a JSON value (an object, array, finite number, boolean or null, sent JSON-encoded)";

/** A few words naming what `v` is, for an error message. */
function what(v: unknown): string {
  if (v === undefined) return "undefined";
  if (v === null) return "null";
  switch (typeof v) {
    case "function":
      return "a function";
    case "symbol":
      return "a symbol";
    case "bigint":
      return `a BigInt (${v}n; send it as a string or a number)`;
    case "number":
      return `the number ${v} (JSON has no ${v})`;
    case "string":
      return "a string with a lone surrogate (it has no UTF-8 form)";
    default:
      break;
  }
  if (v instanceof ArrayBuffer || v instanceof SharedArrayBuffer) return `an ${v.constructor.name} (wrap it: new Uint8Array(buffer))`;
  if (ArrayBuffer.isView(v)) return `a ${v.constructor.name} (pass its bytes as a Uint8Array)`;
  if (v instanceof Map || v instanceof Set) return `a ${v.constructor.name} (JSON would encode it as {}; convert it first)`;
  return `an object (${(v as object).constructor?.name ?? "no prototype"})`;
}

const JSON_ACCEPTED = "a JSON value (a string, finite number, boolean, null, or an object or array of those)";

/** Who is refusing, for the messages: `rt.custom`'s data, a mail item's result, a question's prompt. */
interface Subject {
  /** The start of the message, e.g. `rt.custom(kind, data): data`. */
  what: string;
  /** The end of the message, e.g. `nothing was sent`. */
  after: string;
  /** What is accepted, when not bytes, a string or a JSON value. */
  accepted?: string;
}

const CUSTOM: Subject = { what: "rt.custom(kind, data): data", after: "nothing was sent" };

function refuse(got: string, where: string, subject: Subject): TypeError {
  return new TypeError(`${subject.what} must be ${subject.accepted ?? ACCEPTED}; got ${got}${where}; ${subject.after}`);
}

/** Whether JSON cannot carry `v` as a value (inside an object or array). */
function unencodable(v: unknown): boolean {
  switch (typeof v) {
    case "function":
    case "symbol":
    case "bigint":
      return true;
    case "number":
      return !Number.isFinite(v);
    case "object":
      return (
        v !== null &&
        (v instanceof ArrayBuffer || v instanceof SharedArrayBuffer || ArrayBuffer.isView(v) || v instanceof Map || v instanceof Set)
      );
    default:
      return false;
  }
}

/**
 * The bytes `rt.custom` sends for `data`; throws a TypeError naming the
 * accepted types for anything else: a function, a symbol, a BigInt,
 * undefined, NaN or ±Infinity, a cyclic object, and values JSON would
 * silently lose inside one (functions, symbols, BigInts, non-finite
 * numbers, typed arrays, Maps and Sets, undefined array elements).
 * Properties whose value is undefined are left out, as JSON does.
 */
export function customBytes(data: unknown, subject: Subject = CUSTOM): Uint8Array {
  if (data instanceof Uint8Array) return data;
  if (typeof data === "string") {
    if (!data.isWellFormed()) throw refuse(what(data), "", subject);
    return new TextEncoder().encode(data);
  }
  return encodeJson(data, subject);
}

/**
 * The JSON encoding of `value` (a string too is encoded as JSON, quoted),
 * as UTF-8; throws a TypeError, naming what is wrong and where, for
 * anything JSON cannot carry faithfully (as `customBytes` does). For a
 * question's prompt, an item's progress.
 */
export function jsonBytes(value: unknown, subject: { what: string; after: string }): Uint8Array {
  return encodeJson(value, { ...subject, accepted: JSON_ACCEPTED }, true);
}

/** What `text` (a string, or an object's key) is when it has no UTF-8 form. */
const LONE = "a string with a lone surrogate (it has no UTF-8 form)";

/**
 * `JSON.stringify` of `data`, refusing what JSON would lose; with
 * `strictText` also strings and keys with a lone surrogate anywhere, which
 * JSON.stringify escapes but a strict reader (the supervisor's) refuses.
 */
function encodeJson(data: unknown, subject: Subject, strictText = false): Uint8Array {
  if (data === undefined || unencodable(data) || (strictText && data instanceof Uint8Array)) {
    throw refuse(data instanceof Uint8Array ? "bytes (a Uint8Array; decode them to a JSON value first)" : what(data), "", subject);
  }
  if (strictText && typeof data === "string" && !data.isWellFormed()) throw refuse(LONE, "", subject);
  let text: string | undefined;
  try {
    text = JSON.stringify(data, function (this: unknown, key: string, value: unknown) {
      if (key === "") return value;
      if (strictText && (!key.isWellFormed() || (typeof value === "string" && !value.isWellFormed()))) {
        const at = Array.isArray(this) ? `index ${key}` : `key ${JSON.stringify(key)}`;
        throw new Refusal(refuse(key.isWellFormed() ? LONE : `a key with a lone surrogate (it has no UTF-8 form)`, ` at ${at}`, subject));
      }
      if (unencodable(value) || (value === undefined && Array.isArray(this))) {
        throw new Refusal(refuse(what(value), ` at ${Array.isArray(this) ? `index ${key}` : `key ${JSON.stringify(key)}`}`, subject));
      }
      return value;
    });
  } catch (e) {
    if (e instanceof Refusal) throw e.error;
    // A cycle, or a toJSON that threw.
    const why = e instanceof Error ? (e.message.split("\n")[0] ?? "") : String(e);
    throw refuse(/circular/i.test(why) ? "a cyclic object" : `an object JSON cannot encode (${why})`, "", subject);
  }
  // A toJSON that returns undefined, a function or a symbol.
  if (text === undefined) throw refuse("an object whose toJSON() returns no JSON value", "", subject);
  return new TextEncoder().encode(text);
}

/** Carries a refusal out of JSON.stringify's replacer, apart from errors a toJSON throws. */
class Refusal {
  constructor(readonly error: TypeError) {}
}

/**
 * What a mail handler may return as the item's result: bytes (sent as
 * they are), a string (UTF-8), `undefined` or `null` (no bytes), or any
 * other JSON value (sent JSON-encoded).
 */
export type MailResult = Uint8Array | string | number | boolean | null | undefined | object;

/**
 * The bytes of a mail item's result: bytes as they are, a string as UTF-8,
 * `undefined` and `null` as nothing, any other JSON value JSON-encoded.
 * Throws a TypeError naming the accepted types for anything JSON cannot
 * carry faithfully (as `rt.custom` refuses it).
 */
export function resultBytes(value: unknown, id: bigint): Uint8Array {
  if (value === undefined || value === null) return new Uint8Array(0);
  return customBytes(value, {
    what: `the result of mail ${id}`,
    after: "return bytes, a string or a JSON value, or nothing",
  });
}
