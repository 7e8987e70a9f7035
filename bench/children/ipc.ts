/** The child side of the bench's IPC: answers `{id, type, ...}` requests with `{id, ...}` or `{id, error}`. */

type Handler = (message: Record<string, any>) => unknown;

export function serve(handlers: Record<string, Handler>): void {
  process.on("message", async (m: { id: number; type: string }) => {
    try {
      const handler = handlers[m.type];
      if (!handler) throw new Error(`unknown request ${m.type}`);
      const answer = (await handler(m)) ?? {};
      process.send?.({ id: m.id, ...(answer as object) });
    } catch (err) {
      process.send?.({ id: m.id, error: (err as Error).message || String(err) });
    }
  });
  // The bench going away takes its helpers with it.
  process.on("disconnect", () => process.exit(0));
}
