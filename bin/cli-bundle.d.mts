/** Types of cli-bundle.mjs, which stays plain JavaScript so that any Node runs it. */
export declare function freshBundle(): string | undefined;
