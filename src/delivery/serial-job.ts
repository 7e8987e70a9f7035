/**
 * Background work of the dispatcher that runs one at a time beside its loop (parking and unparking
 * deliveries, docs/delivery.md, *Inactive listeners*). Asked for while it runs, it runs once more when
 * that run has settled, so that what changed after the run's last look is seen, however late in the run
 * the request came; asked for while it may not start (the dispatcher stopped), it does nothing.
 */
export class SerialJob {
  readonly #run: () => Promise<unknown>;
  readonly #canStart: () => boolean;
  readonly #failed: (err: unknown) => void;
  #running: Promise<void> | undefined;
  #again = false;

  constructor(
    run: () => Promise<unknown>,
    options: { canStart: () => boolean; failed: (err: unknown) => void },
  ) {
    this.#run = run;
    this.#canStart = options.canStart;
    this.#failed = options.failed;
  }

  /** The run under way, if any; it never rejects (a failure goes to `failed`). */
  get running(): Promise<void> | undefined {
    return this.#running;
  }

  /** Starts a run, or asks the one under way for one more after it. */
  request(): void {
    if (this.#running) {
      this.#again = true;
      return;
    }
    if (!this.#canStart()) return;
    // Begun a turn later, so that a request from within the run's first steps finds it under way.
    this.#running = Promise.resolve()
      .then(() => this.#run())
      .then(
        () => undefined,
        (err: unknown) => this.#failed(err),
      )
      .finally(() => {
        const again = this.#again;
        this.#again = false;
        this.#running = undefined;
        if (again) this.request();
      });
  }
}
