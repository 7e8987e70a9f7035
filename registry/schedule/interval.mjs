/**
 * Fount registry: a schedule on a fixed interval. There is no `run`: for a timer source without one,
 * Fount emits the timer event itself, `{timestamp, interval_seconds}`, without starting a sandbox.
 */
export default {
  key: "schedule-interval",
  name: "Interval Schedule",
  description:
    "Emit an event on a fixed interval (default every 15 minutes). The event is the timer event: `{timestamp, interval_seconds}`.",
  version: "0.1.0",
  type: "source",
  props: {
    timer: {
      type: "$.interface.timer",
      label: "Interval",
      description: "How often to emit, as `{intervalSeconds}` (at least 1).",
      default: { intervalSeconds: 900 },
    },
  },
};
