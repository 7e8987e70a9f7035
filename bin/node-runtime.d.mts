/** Types of node-runtime.mjs, which stays plain JavaScript so that any Node runs it. */
export declare const nodePackages: Readonly<Record<string, string>>;
export declare const minimumServerNode: string;
export declare function nodePackageFor(platform: string, arch: string): string | undefined;
export declare function atLeast(version: string, minimum?: string): boolean;
export declare function bundledNode(
  platform?: string,
  arch?: string,
  from?: string,
): { packageName: string; path: string | undefined } | undefined;
export declare function runOnBundledNode(script: string, args: string[]): Promise<number>;
