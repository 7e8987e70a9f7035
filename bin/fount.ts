#!/usr/bin/env node
/** The `fount` command line; everything lives in src/cli. */
import { main } from "../src/cli/main.ts";

process.exitCode = await main(process.argv.slice(2));
