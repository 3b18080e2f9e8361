// A receipt verifier in a dozen lines of another language's standard JOSE library (jose):
// node verify-receipt.mjs <jwks.json> <receipt.jws>  ->  the receipt's claims, or an error.
// Run by tests/e2e/test_receipts_node.py; shown in docs/receipts.md.
import { readFileSync } from "node:fs";
import { compactVerify, createLocalJWKSet } from "jose";

const [jwksFile, receiptFile] = process.argv.slice(2);
const keys = createLocalJWKSet(JSON.parse(readFileSync(jwksFile, "utf8")));
const token = readFileSync(receiptFile, "utf8").trim();
const { payload, protectedHeader } = await compactVerify(token, keys, { algorithms: ["Ed25519", "EdDSA"] });
const claims = JSON.parse(new TextDecoder().decode(payload));
console.log(JSON.stringify({ kid: protectedHeader.kid, claims }));
