/** The part of autocannon's API the bench uses (the package ships no types). */
declare module "autocannon" {
  interface AutocannonRequest {
    method?: string;
    path?: string;
    headers?: Record<string, string>;
    body?: string;
    setupRequest?: (req: AutocannonRequest, context: Record<string, unknown>) => AutocannonRequest;
  }

  interface AutocannonOptions {
    url: string;
    connections?: number;
    duration?: number;
    amount?: number;
    method?: string;
    headers?: Record<string, string>;
    body?: string;
    overallRate?: number;
    /** Seconds a request may take. */
    timeout?: number;
    requests?: AutocannonRequest[];
  }

  interface AutocannonHistogram {
    average: number;
    mean: number;
    stddev: number;
    min: number;
    max: number;
    p50: number;
    p90: number;
    p99: number;
    p99_9: number;
    totalCount?: number;
    sent?: number;
  }

  interface AutocannonResult {
    duration: number;
    errors: number;
    timeouts: number;
    non2xx: number;
    resets: number;
    "2xx": number;
    statusCodeStats: Record<string, { count: number }>;
    latency: AutocannonHistogram;
    requests: AutocannonHistogram;
  }

  interface AutocannonInstance {
    stop(): void;
    /** Each response as it arrives: its status, size in bytes and latency in ms. */
    on(
      event: "response",
      listener: (client: unknown, statusCode: number, bytes: number, responseTimeMs: number) => void,
    ): void;
  }

  function autocannon(
    options: AutocannonOptions,
    callback: (err: Error | null, result: AutocannonResult) => void,
  ): AutocannonInstance;

  export type { AutocannonOptions, AutocannonRequest, AutocannonResult };
  export default autocannon;
}
