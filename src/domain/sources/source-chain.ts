/**
 * The per-source chain of the runner: invocations of one source are handed to the executor one after
 * another, in call order, each once the previous one's hand-over settled. Only the hand-over is chained,
 * not the run: the executor runs a source's invocations one at a time and lets each see the previous
 * one's db writes, while the next is already queued (pipelining instead of one IPC round trip each).
 */

const ignore = (): undefined => undefined;

export class SourceChain {
  /** Per source, the hand-over of its last invocation, settled either way; gone once nothing follows it. */
  readonly #tails = new Map<string, Promise<unknown>>();

  /** Runs `step` once the source's previous step settled; its result, as `step` gives it. */
  next<T>(sourceId: string, step: () => Promise<T>): Promise<T> {
    const previous = this.#tails.get(sourceId) ?? Promise.resolve();
    const handOver = previous.catch(ignore).then(step);
    const settled = handOver.then(ignore, ignore);
    this.#tails.set(sourceId, settled);
    void settled.then(() => {
      if (this.#tails.get(sourceId) === settled) this.#tails.delete(sourceId);
    });
    return handOver;
  }
}
