/**
 * Fount registry: a schedule on a cron expression. Like the interval schedule it has no `run`; Fount
 * emits the timer event `{timestamp, cron, timezone}` at every matching time.
 */
export default {
  key: "schedule-cron",
  name: "Cron Schedule",
  description:
    "Emit an event on a cron schedule (default at the start of every hour, UTC). The event is the timer event: `{timestamp, cron, timezone}`.",
  version: "0.1.0",
  type: "source",
  props: {
    timer: {
      type: "$.interface.timer",
      label: "Schedule",
      description:
        'A cron expression of 5 or 6 fields, as `{cron}`, optionally with a `timezone` such as "Europe/Berlin" (default UTC).',
      default: { cron: "0 * * * *" },
    },
  },
};
