/**
 * A TCP proxy between a test server and its database, to take the database away while the server runs
 * and give it back: `cut("reset")` closes every connection and resets new ones (a database that went
 * down), `cut("drop")` keeps connections open but forwards nothing and answers nothing (a network that
 * drops packets), `restore()` forwards new connections again.
 */
import net from "node:net";

export type CutMode = "reset" | "drop";

export class TcpProxy {
  readonly #server: net.Server;
  readonly #target: { host: string; port: number };
  /** Open connections, each with its pair (client side, database side). */
  readonly #sockets = new Set<net.Socket>();
  #cut: CutMode | undefined;

  private constructor(target: { host: string; port: number }) {
    this.#target = target;
    this.#server = net.createServer((client) => this.#accept(client));
  }

  static async start(target: { host: string; port: number }): Promise<TcpProxy> {
    const proxy = new TcpProxy(target);
    await new Promise<void>((resolve) => proxy.#server.listen(0, "127.0.0.1", resolve));
    return proxy;
  }

  get port(): number {
    return (this.#server.address() as net.AddressInfo).port;
  }

  /** Takes the database away (see the module comment). */
  cut(mode: CutMode): void {
    this.#cut = mode;
    if (mode === "reset") this.#destroyAll();
    else for (const socket of this.#sockets) socket.pause().unpipe();
  }

  /** Forwards new connections again; connections held by a "drop" cut are closed (their bytes were lost). */
  restore(): void {
    if (this.#cut === "drop") this.#destroyAll();
    this.#cut = undefined;
  }

  async close(): Promise<void> {
    this.#destroyAll();
    await new Promise((resolve) => this.#server.close(resolve));
  }

  #destroyAll(): void {
    for (const socket of this.#sockets) socket.destroy();
    this.#sockets.clear();
  }

  #track(socket: net.Socket): void {
    this.#sockets.add(socket);
    socket.on("error", () => undefined);
    socket.on("close", () => this.#sockets.delete(socket));
  }

  #accept(client: net.Socket): void {
    this.#track(client);
    if (this.#cut === "reset") return void client.resetAndDestroy();
    // A dropping network: the connection is open, and nothing ever comes back.
    if (this.#cut === "drop") return void client.pause();
    const upstream = net.connect(this.#target);
    this.#track(upstream);
    client.pipe(upstream);
    upstream.pipe(client);
    client.on("close", () => upstream.destroy());
    upstream.on("close", () => client.destroy());
  }
}
