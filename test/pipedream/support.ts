/**
 * Shared by the tests that run Pipedream's own published components, unmodified: downloading their npm
 * packages at test time (never committed), self-signed certificates for the TLS the components insist
 * on, and making the sandboxed executors trust such a certificate.
 */
import { execFileSync } from "node:child_process";
import { chmodSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import os from "node:os";
import path from "node:path";

/** The part of pacote (npm's package fetcher, a dependency of Fount) these tests use. */
interface Pacote {
  extract(spec: string, dest: string, options: Record<string, unknown>): Promise<{ resolved: string }>;
}

const pacote = createRequire(import.meta.url)("pacote") as Pacote;

/** The npm cache of test servers: a package downloaded once per machine serves every later run. */
const npmCache = path.join(os.tmpdir(), "fount-test-npm-cache");

/** Errors that mean "no network to the registry", as opposed to a package that is not there. */
const offlineCodes = new Set([
  "ENOTFOUND",
  "EAI_AGAIN",
  "ECONNREFUSED",
  "ECONNRESET",
  "ETIMEDOUT",
  "ENETUNREACH",
  "EHOSTUNREACH",
]);

/** A package unpacked into a temp folder, or why it could not be had (registry unreachable). */
export type Fetched = { dir: string; version: string } | { skip: string };

/**
 * Downloads and unpacks `name@version` (the package folder itself, as `npm pack` would give it). Only
 * an unreachable registry gives `skip`: the server would need it too, to install the component's
 * packages. Any other failure throws.
 */
export async function fetchPackage(name: string, version: string): Promise<Fetched> {
  const dir = mkdtempSync(path.join(os.tmpdir(), `fount-pd-${name.replace(/\W+/g, "-")}-`));
  const spec = `${name}@${version}`;
  try {
    await pacote.extract(spec, dir, { cache: npmCache, timeout: 30_000 });
  } catch (err) {
    rmSync(dir, { recursive: true, force: true });
    if (!offlineCodes.has((err as { code?: string }).code ?? "")) throw err;
    return {
      skip: `the npm registry is unreachable (${(err as Error).message}), so ${spec} cannot be downloaded`,
    };
  }
  const pkg = JSON.parse(readFileSync(path.join(dir, "package.json"), "utf8")) as { version: string };
  return { dir, version: pkg.version };
}

/** A self-signed certificate for 127.0.0.1 and localhost, valid one day, made with the openssl CLI. */
export function selfSignedCertificate(): { key: string; cert: string; certFile: string; dir: string } {
  const dir = mkdtempSync(path.join(os.tmpdir(), "fount-pd-tls-"));
  const keyFile = path.join(dir, "key.pem");
  const certFile = path.join(dir, "cert.pem");
  execFileSync(
    "openssl",
    [
      "req",
      "-x509",
      "-newkey",
      "rsa:2048",
      "-nodes",
      "-keyout",
      keyFile,
      "-out",
      certFile,
      "-days",
      "1",
      "-subj",
      "/CN=127.0.0.1",
      "-addext",
      "subjectAltName=IP:127.0.0.1,DNS:localhost",
    ],
    { stdio: "ignore" },
  );
  return { key: readFileSync(keyFile, "utf8"), cert: readFileSync(certFile, "utf8"), certFile, dir };
}

/**
 * Makes `certFile` usable as FOUNT_EXECUTOR_CA_CERTS, as an operator would for a GitLab or database
 * behind a private CA. Executors may run under their own uid, so the certificate and its folder are made
 * readable by everyone (the private key beside them stays 0600: only this process reads it).
 */
export function trustInExecutors(certFile: string): { FOUNT_EXECUTOR_CA_CERTS: string } {
  chmodSync(path.dirname(certFile), 0o755);
  chmodSync(certFile, 0o644);
  return { FOUNT_EXECUTOR_CA_CERTS: certFile };
}
