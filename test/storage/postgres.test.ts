import { openTestPostgres } from "../pg-schemas.ts";
import { storageContract } from "./contract.ts";

storageContract("postgres", openTestPostgres);
