// Canonical JSON and the evidence payload hash, byte for byte as Bulkhead computes them:
// keys sorted by code point, separators "," and ":", UTF-8 with no \u escaping, numbers as
// Python writes them (integers in plain digits, other numbers as Python's repr(float)).
import { createHash } from "node:crypto";

export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

const byCodePoint = (a: string, b: string): number => {
  const x = [...a].map((c) => c.codePointAt(0) as number);
  const y = [...b].map((c) => c.codePointAt(0) as number);
  for (let i = 0; i < Math.min(x.length, y.length); i++) {
    if (x[i] !== y[i]) return (x[i] as number) - (y[i] as number);
  }
  return x.length - y.length;
};

/** A number as Python's json writes it: an integer in plain digits, else repr(float). */
export function pythonNumber(value: number): string {
  if (!Number.isFinite(value)) throw new RangeError("NaN and Infinity have no JSON form");
  if (Number.isInteger(value) && Math.abs(value) < 1e21) return Object.is(value, -0) ? "0" : String(value);
  const [mantissa, exponentText] = value.toExponential().split("e") as [string, string];
  const exponent = Number(exponentText);
  const negative = mantissa.startsWith("-");
  const digits = mantissa.replace("-", "").replace(".", "");
  const sign = negative ? "-" : "";
  if (exponent >= -4 && exponent < 16) {
    // Fixed notation, as repr does for 1e-4 <= |x| < 1e16 (0.0001 prints as 0.0001).
    if (exponent < 0) return `${sign}0.${"0".repeat(-exponent - 1)}${digits}`;
    const whole = digits.padEnd(exponent + 1, "0");
    const intPart = whole.slice(0, exponent + 1);
    const fraction = whole.slice(exponent + 1) || "0";
    return `${sign}${intPart}.${fraction}`;
  }
  const head = digits.length > 1 ? `${digits[0]}.${digits.slice(1)}` : `${digits}`;
  const exp = Math.abs(exponent).toString().padStart(2, "0");
  return `${sign}${head}e${exponent < 0 ? "-" : "+"}${exp}`;
}

function checkString(value: string, where: string): void {
  for (let i = 0; i < value.length; i++) {
    const code = value.charCodeAt(i);
    if (code >= 0xd800 && code <= 0xdbff) {
      const next = value.charCodeAt(i + 1);
      if (next >= 0xdc00 && next <= 0xdfff) {
        i++;
        continue;
      }
    }
    if (code >= 0xd800 && code <= 0xdfff) {
      throw new RangeError(`${where}: a lone surrogate, which UTF-8 cannot encode`);
    }
  }
}

function write(value: unknown, where: string, open: Set<object>): string {
  if (value === null) return "null";
  if (typeof value === "boolean") return value ? "true" : "false";
  if (typeof value === "number") {
    if (!Number.isFinite(value)) throw new RangeError(`${where}: NaN and Infinity have no JSON form`);
    return pythonNumber(value);
  }
  if (typeof value === "string") {
    checkString(value, where);
    return JSON.stringify(value);
  }
  if (typeof value === "object") {
    if (open.has(value)) throw new TypeError(`${where}: circular reference`);
    open.add(value);
    try {
      if (Array.isArray(value)) return `[${value.map((v, i) => write(v, `${where}[${i}]`, open)).join(",")}]`;
      const entries = Object.keys(value).sort(byCodePoint);
      const object = value as Record<string, unknown>;
      return `{${entries.map((k) => `${write(k, where, open)}:${write(object[k], `${where}.${k}`, open)}`).join(",")}}`;
    } finally {
      open.delete(value);
    }
  }
  throw new TypeError(`${where}: ${typeof value} is not a JSON value`);
}

/** The canonical JSON text of a value (its UTF-8 bytes are what is hashed). */
export function canonicalJson(value: unknown): string {
  return write(value, "$", new Set());
}

export function sha256Hex(data: string | Uint8Array): string {
  return createHash("sha256").update(data).digest("hex");
}

/** `sha256:` + the hex SHA-256 of the payload's canonical JSON. */
export function payloadHash(payload: unknown): string {
  return "sha256:" + sha256Hex(Buffer.from(canonicalJson(payload), "utf8"));
}

export type Cell = null | boolean | number | string;

/** A database value as the verifier reads it; select dates, decimals and UUIDs as text. */
export function queryCell(value: unknown): Cell {
  if (value === null || typeof value === "boolean" || typeof value === "string") return value;
  if (typeof value === "number") {
    if (Number.isNaN(value)) return "NaN";
    if (!Number.isFinite(value)) return value > 0 ? "Infinity" : "-Infinity";
    return value;
  }
  if (typeof value === "bigint") {
    if (value > BigInt(Number.MAX_SAFE_INTEGER) || value < BigInt(Number.MIN_SAFE_INTEGER)) {
      throw new RangeError("an integer beyond 2^53 cannot be sent exactly as a JSON number: select it as text");
    }
    return Number(value);
  }
  if (value instanceof Uint8Array) return "\\x" + Buffer.from(value).toString("hex");
  throw new TypeError(`${Object.prototype.toString.call(value)} has no query_result form: select it as text`);
}

export function queryResultPayload(columns: string[], rows: unknown[][]): { columns: string[]; rows: Cell[][] } {
  return { columns: [...columns], rows: rows.map((row) => row.map(queryCell)) };
}

/** A file's lines: split on "\n" only ("\r" stays), no empty line after a final "\n". */
export function splitLines(content: string): string[] {
  if (content === "") return [];
  const lines = content.split("\n");
  if (lines[lines.length - 1] === "") lines.pop();
  return lines;
}

export function fileReadPayload(path: string, start: number, end: number, lines: string[]) {
  if (!Number.isInteger(start) || !Number.isInteger(end) || start < 1 || end < start) {
    throw new RangeError(`the line range must have 1 <= start <= end, got ${start}-${end}`);
  }
  if (lines.length !== end - start + 1) {
    throw new RangeError(`lines ${start}-${end} are ${end - start + 1} lines, got ${lines.length}`);
  }
  return { path, lines: [start, end], text: lines.join("\n") };
}

const HEX = /^[0-9a-f]{64}$/;

export function testRunPayload(command: string, exitCode: number, outputSha256: string) {
  if (!Number.isInteger(exitCode)) throw new TypeError("exit_code must be an integer");
  if (!HEX.test(outputSha256)) throw new RangeError("output_sha256 must be 64 lowercase hex digits");
  return { command, exit_code: exitCode, output_sha256: outputSha256 };
}

export function httpExchangePayload(method: string, url: string, status: number, bodySha256: string) {
  if (!Number.isInteger(status)) throw new TypeError("status must be an integer");
  if (!HEX.test(bodySha256)) throw new RangeError("body_sha256 must be 64 lowercase hex digits");
  return { request: { method: method.toUpperCase(), url }, response: { status, body_sha256: bodySha256 } };
}
