/**
 * The body encoding: bincode 2 with its standard configuration, as the Rust
 * codec (`ipc/src/codec.rs`) writes it. Integers wider than a byte are
 * varints (below 251: one byte; 251, 252, 253: then 2, 4, 8 little-endian
 * bytes), `u8` and fixed byte arrays are raw bytes, strings and byte
 * vectors are a varint length then the bytes, options a 0/1 tag, enums a
 * varint variant index. The reader refuses exactly what the Rust decoder
 * refuses, and checks every length against the bytes actually present
 * before it copies anything.
 */

/** The body could not be decoded (or a value cannot be encoded). */
export class DecodeError extends Error {
  override name = "DecodeError";
}

/** A value the wire cannot carry (out of range, not well-formed text). */
export class EncodeError extends Error {
  override name = "EncodeError";
}

const U16_BYTE = 251;
const U32_BYTE = 252;
const U64_BYTE = 253;
const U128_BYTE = 254;
const U32_MAX = 0xffff_ffff;
const U64_MAX = (1n << 64n) - 1n;

const utf8 = new TextEncoder();
/** Strict: invalid UTF-8 throws; a leading BOM is kept, as Rust keeps it. */
const strictUtf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

/** Appends bincode values to a growing buffer. */
export class Writer {
  private buf: Uint8Array;
  private view: DataView;
  private len = 0;

  constructor(capacity = 64) {
    this.buf = new Uint8Array(capacity);
    this.view = new DataView(this.buf.buffer);
  }

  /** Bytes written so far. */
  get length(): number {
    return this.len;
  }

  /** Forgets everything written after the first `n` bytes. */
  truncate(n: number): void {
    this.len = Math.min(this.len, n);
  }

  /** Forgets everything, keeping the buffer for reuse. */
  reset(): void {
    this.len = 0;
  }

  /** A copy-free view of what was written. */
  bytes(): Uint8Array {
    return this.buf.subarray(0, this.len);
  }

  private reserve(n: number): void {
    const need = this.len + n;
    if (need <= this.buf.length) return;
    let cap = this.buf.length * 2;
    while (cap < need) cap *= 2;
    const next = new Uint8Array(cap);
    next.set(this.buf.subarray(0, this.len));
    this.buf = next;
    this.view = new DataView(next.buffer);
  }

  u8(v: number): this {
    this.reserve(1);
    this.buf[this.len++] = v;
    return this;
  }

  /** A big-endian u32 at `at` (the frame length prefix), over bytes already written. */
  patchU32BE(at: number, v: number): void {
    this.view.setUint32(at, v, false);
  }

  bool(v: boolean): this {
    return this.u8(v ? 1 : 0);
  }

  /** A u32 varint; `v` must be an integer in 0..=2^32-1. */
  u32(v: number, what: string): this {
    if (!Number.isInteger(v) || v < 0 || v > U32_MAX) {
      throw new EncodeError(`${what} must be an integer from 0 to ${U32_MAX}, got ${v}`);
    }
    this.reserve(5);
    if (v < U16_BYTE) {
      this.buf[this.len++] = v;
    } else if (v <= 0xffff) {
      this.buf[this.len++] = U16_BYTE;
      this.view.setUint16(this.len, v, true);
      this.len += 2;
    } else {
      this.buf[this.len++] = U32_BYTE;
      this.view.setUint32(this.len, v, true);
      this.len += 4;
    }
    return this;
  }

  /** A u64 varint; `v` must be in 0..=2^64-1. */
  u64(v: bigint, what: string): this {
    if (typeof v !== "bigint" || v < 0n || v > U64_MAX) {
      throw new EncodeError(`${what} must be a bigint from 0 to ${U64_MAX}, got ${String(v)}`);
    }
    if (v <= 0xffff_ffffn) return this.u32(Number(v), what);
    this.reserve(9);
    this.buf[this.len++] = U64_BYTE;
    this.view.setBigUint64(this.len, v, true);
    this.len += 8;
    return this;
  }

  /** A length or a small count (always below 2^53). */
  private length_(n: number): void {
    if (n <= U32_MAX) this.u32(n, "length");
    else this.u64(BigInt(n), "length");
  }

  /** Raw bytes with no length (fixed-size arrays). */
  raw(b: Uint8Array): this {
    this.reserve(b.length);
    this.buf.set(b, this.len);
    this.len += b.length;
    return this;
  }

  /** A byte vector: length, then the bytes. */
  bytesField(b: Uint8Array): this {
    this.length_(b.length);
    return this.raw(b);
  }

  /** A string: its UTF-8 length, then the bytes; refuses lone surrogates. */
  str(s: string, what: string): this {
    if (typeof s !== "string") {
      throw new EncodeError(`${what} must be a string, got ${typeof s}`);
    }
    if (!s.isWellFormed()) {
      throw new EncodeError(`${what} is not well-formed text (it holds a lone surrogate), so it has no UTF-8 form`);
    }
    // ASCII fast path: one byte per code unit.
    if (s.length < 128 && isAscii(s)) {
      this.length_(s.length);
      this.reserve(s.length);
      for (let i = 0; i < s.length; i++) this.buf[this.len++] = s.charCodeAt(i);
      return this;
    }
    return this.bytesField(utf8.encode(s));
  }

  /** An option: tag 0, or tag 1 then the value. */
  option<T>(v: T | null | undefined, write: (v: T) => void): this {
    if (v === null || v === undefined) return this.u8(0);
    this.u8(1);
    write(v);
    return this;
  }

  /** An enum's variant index. */
  variant(index: number): this {
    return this.u32(index, "variant index");
  }
}

function isAscii(s: string): boolean {
  for (let i = 0; i < s.length; i++) if (s.charCodeAt(i) > 0x7f) return false;
  return true;
}

/** Reads bincode values from a body, refusing anything the Rust decoder refuses. */
export class Reader {
  private pos = 0;
  private readonly view: DataView;

  constructor(private readonly buf: Uint8Array) {
    this.view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  }

  /** Bytes not yet read. */
  get remaining(): number {
    return this.buf.length - this.pos;
  }

  private need(n: number, what: string): void {
    if (n > this.buf.length - this.pos) {
      throw new DecodeError(
        `the body ends inside ${what}: ${n} bytes needed at offset ${this.pos}, ${this.buf.length - this.pos} left`,
      );
    }
  }

  u8(what: string): number {
    this.need(1, what);
    return this.buf[this.pos++] as number;
  }

  bool(what: string): boolean {
    const b = this.u8(what);
    if (b > 1) throw new DecodeError(`${what}: ${b} is not a bool (0 or 1)`);
    return b === 1;
  }

  u32(what: string): number {
    const first = this.u8(what);
    if (first < U16_BYTE) return first;
    if (first === U16_BYTE) {
      this.need(2, what);
      const v = this.view.getUint16(this.pos, true);
      this.pos += 2;
      return v;
    }
    if (first === U32_BYTE) {
      this.need(4, what);
      const v = this.view.getUint32(this.pos, true);
      this.pos += 4;
      return v;
    }
    throw new DecodeError(`${what}: varint tag ${first} is not valid for a u32 (${tagName(first)})`);
  }

  u64(what: string): bigint {
    const first = this.buf[this.pos];
    if (first !== undefined && first !== U64_BYTE) {
      if (first === U128_BYTE || first === 255) {
        this.pos++;
        throw new DecodeError(`${what}: varint tag ${first} is not valid for a u64 (${tagName(first)})`);
      }
      return BigInt(this.u32(what));
    }
    this.u8(what);
    this.need(8, what);
    const v = this.view.getBigUint64(this.pos, true);
    this.pos += 8;
    return v;
  }

  /** A length: a u64 varint that must fit in the bytes left (each element takes at least one). */
  private length_(what: string): number {
    const n = this.u64(`the length of ${what}`);
    if (n > BigInt(this.remaining)) {
      throw new DecodeError(`${what} claims ${n} bytes but only ${this.remaining} are left in the body`);
    }
    return Number(n);
  }

  /** `n` raw bytes (a fixed-size array), copied. */
  raw(n: number, what: string): Uint8Array {
    this.need(n, what);
    // A plain Uint8Array copy, whatever the input's class (a Buffer's slice would share memory).
    const out = new Uint8Array(this.buf.subarray(this.pos, this.pos + n));
    this.pos += n;
    return out;
  }

  /** A byte vector, copied out at its real size. */
  bytesField(what: string): Uint8Array {
    return this.raw(this.length_(what), what);
  }

  /** A string, strictly UTF-8. */
  str(what: string): string {
    const n = this.length_(what);
    const start = this.pos;
    this.pos += n;
    // Short ASCII (names, ids) without the decoder's call overhead.
    if (n <= 64) {
      let ascii = "";
      let i = start;
      for (; i < start + n; i++) {
        const c = this.buf[i] as number;
        if (c > 0x7f) break;
        ascii += String.fromCharCode(c);
      }
      if (i === start + n) return ascii;
    }
    const bytes = this.buf.subarray(start, start + n);
    try {
      return strictUtf8.decode(bytes);
    } catch {
      throw new DecodeError(`${what} is not valid UTF-8`);
    }
  }

  option<T>(what: string, read: () => T): T | null {
    const tag = this.u8(`the option tag of ${what}`);
    if (tag === 0) return null;
    if (tag === 1) return read();
    throw new DecodeError(`${what}: option tag ${tag} is neither 0 nor 1`);
  }

  /** An enum's variant index, which must be below `count`. */
  variant(what: string, count: number): number {
    const v = this.u32(`the variant of ${what}`);
    if (v >= count) throw new DecodeError(`${what}: variant ${v} names none (there are ${count})`);
    return v;
  }

  /** Refuses bytes left after the value. */
  end(): void {
    if (this.remaining !== 0) {
      throw new DecodeError(`${this.remaining} trailing bytes after the message`);
    }
  }
}

function tagName(tag: number): string {
  switch (tag) {
    case U32_BYTE:
      return "a 4-byte value";
    case U64_BYTE:
      return "an 8-byte value";
    case U128_BYTE:
      return "a 16-byte value";
    default:
      return "reserved";
  }
}
