// GPU figures the daemon did not measure: with no GPU inventory (no NVML) its JSON says null,
// and the pages say "not measured", never "nothing on the GPUs" or 0 B, as if NVML had read it.

export const NOT_MEASURED = "not measured (no GPU inventory)";

// What a model holds on the GPUs (GPU UUID -> bytes, or null), in `show`'s words.
export function heldWords(held, show) {
  if (held === null) return NOT_MEASURED;
  const total = Object.values(held || {}).reduce((a, b) => a + b, 0);
  return total ? show(held) : "nothing on the GPUs";
}

// The hardware page without GPUs: no inventory at all (the `none` backend), or none reported.
export function noGpuWords(backend) {
  if (!backend || backend === "none") return "no GPU inventory (no NVML): GPU memory not measured";
  return `no GPU reported by the ${backend} backend`;
}
