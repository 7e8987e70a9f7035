/**
 * Route schemas are compiled when a route is first used, not when the app starts. Fastify compiles a
 * validator (Ajv) and an answer serializer (fast-json-stringify) for every schema of every route while it
 * starts; with the API's routes that was most of a start's CPU, paid again by every node and every test
 * server, for routes most processes never call (docs/architecture.md, *Start-up*). Each compiler here
 * returns a function that compiles its schema at its first call and keeps the result; what it compiles,
 * and with which options, is what Fastify's own compilers would compile at start. `compileAll` compiles
 * whatever is still pending, so that a test can prove every schema compiles.
 */
import ValidatorSelector from "@fastify/ajv-compiler";
import SerializerSelector from "@fastify/fast-json-stringify-compiler";
import type { FastifyServerOptions } from "fastify";

declare module "fastify" {
  interface FastifyInstance {
    /** The app's route schemas, compiled at first use (http/schema-compilers.ts). */
    routeSchemas: RouteSchemas;
  }
}

/** A validator as Fastify calls it: the result, with the errors of the last call on `errors`. */
type Validator = ((data: any, context?: any) => unknown) & { errors?: unknown; schemaEnv?: unknown };
type Serializer = (data: any) => string;
type Factories = NonNullable<NonNullable<FastifyServerOptions["schemaController"]>["compilersFactory"]>;

export class RouteSchemas {
  /** What has not been compiled yet: each entry compiles one schema. */
  readonly #pending = new Set<() => unknown>();

  /**
   * A validator that compiles at its first use. Fastify reads `schemaEnv` before each call to pass an
   * Ajv function the body's parent (so that Ajv may replace the root value), so reading it compiles too.
   */
  validator<V extends Validator>(compile: () => V): V {
    const compiled = this.#once(compile);
    const validate = ((data: unknown, context?: unknown) => {
      const target = compiled();
      const result = context === undefined ? target(data) : target(data, context);
      validate.errors = target.errors;
      return result;
    }) as V;
    Object.defineProperty(validate, "schemaEnv", { get: () => compiled().schemaEnv });
    return validate;
  }

  /** A serializer that compiles at its first use. */
  serializer(compile: () => Serializer): Serializer {
    const compiled = this.#once(compile);
    return (data) => compiled()(data);
  }

  /** `compile`, called once when first needed (here or by `compileAll`), then its result. */
  #once<T>(compile: () => T): () => T {
    let result: { value: T } | undefined;
    const once = () => {
      if (result === undefined) {
        result = { value: compile() };
        this.#pending.delete(once);
      }
      return result.value;
    };
    this.#pending.add(once);
    return once;
  }

  /** Compiles every schema not compiled yet; answers how many. Throws what a bad schema throws. */
  compileAll(): number {
    const pending = [...this.#pending];
    for (const compile of pending) compile();
    return pending.length;
  }

  /** Fastify's default compilers (`schemaController.compilersFactory`), each schema compiled at first use. */
  factory(): Factories {
    const validators = ValidatorSelector();
    const serializers = SerializerSelector();
    return {
      buildValidator: (
        externals: Parameters<typeof validators>[0],
        options: Parameters<typeof validators>[1],
      ) => {
        const compiler = validators(externals, options);
        return (route: Parameters<typeof compiler>[0]) => this.validator(() => compiler(route));
      },
      buildSerializer: (
        externals: Parameters<typeof serializers>[0],
        options: Parameters<typeof serializers>[1],
      ) => {
        const compiler = serializers(externals, options);
        return (route: Parameters<typeof compiler>[0]) => this.serializer(() => compiler(route));
      },
    };
  }
}
