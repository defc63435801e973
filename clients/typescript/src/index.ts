export * from "./batches.js";
export * from "./canonical.js";
export * from "./client.js";
export * from "./errors.js";
export * from "./evidence.js";
export * from "./types.js";
