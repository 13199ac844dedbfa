// k8s-validate.js -- validates every object of the given YAML files against the
// Kubernetes object schemas of the npm package kubernetes-models (the API's OpenAPI
// schemas as JSON Schema), so a missing required field, a value of the wrong type or an
// unknown kind in an example fails before an operator applies it (unknown fields pass:
// the schemas allow them). Prints one line per object; exits 1 on any invalid one.
// Usage: NODE_PATH=DIR/node_modules node k8s-validate.js FILE...
"use strict";
const fs = require("fs");
const YAML = require("yaml");

// Finds the model class of an object: kubernetes-models/<group>/<version>/<Kind>, the
// core group without a group directory.
function modelFor(apiVersion, kind) {
  const path = "kubernetes-models/" + apiVersion + "/" + kind;
  try {
    return require(path)[kind];
  } catch (e) {
    throw new Error("no schema for apiVersion " + apiVersion + " kind " + kind +
                    " (looked for " + path + ")");
  }
}

let failed = 0;
let passed = 0;
for (const file of process.argv.slice(2)) {
  const docs = YAML.parseAllDocuments(fs.readFileSync(file, "utf8"));
  for (const doc of docs) {
    if (doc.errors.length) {
      console.log("FAIL " + file + ": " + doc.errors.map(e => e.message).join("; "));
      failed++;
      continue;
    }
    const obj = doc.toJS();
    if (obj === null) continue;
    const label = file + ": " + obj.kind + "/" + (obj.metadata || {}).name;
    try {
      const Model = modelFor(obj.apiVersion, obj.kind);
      new Model(obj).validate();
      console.log("ok   " + label);
      passed++;
    } catch (e) {
      console.log("FAIL " + label + ": " + e.message);
      failed++;
    }
  }
}
console.log("k8s-validate: " + passed + " passed, " + failed + " failed");
process.exit(failed || passed === 0 ? 1 : 0);
