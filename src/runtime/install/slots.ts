/**
 * A counting semaphore with deadlines: at most `size` holders at once, the others waiting in arrival
 * order until a slot frees or their own deadline passes. The installer bounds its processes with it.
 */
export class Slots {
  #free: number;
  readonly #waiting: Array<(release: () => void) => void> = [];

  constructor(size: number) {
    this.#free = Math.max(1, size);
  }

  /** A slot, as the function that gives it back; rejects with `timeout` when `deadline` passes first. */
  acquire(deadline: number, timeout: () => Error): Promise<() => void> {
    if (this.#free > 0) {
      this.#free--;
      return Promise.resolve(this.#releaser());
    }
    return new Promise((resolve, reject) => {
      const grant = (release: () => void) => {
        clearTimeout(timer);
        resolve(release);
      };
      const timer = setTimeout(
        () => {
          this.#waiting.splice(this.#waiting.indexOf(grant), 1);
          reject(timeout());
        },
        Math.max(0, deadline - Date.now()),
      );
      this.#waiting.push(grant);
    });
  }

  #releaser(): () => void {
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const next = this.#waiting.shift();
      if (next) next(this.#releaser());
      else this.#free++;
    };
  }
}
