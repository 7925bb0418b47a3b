// The console's only script: a tool form's fields become the JSON arguments it sends.
"use strict";

function fieldValue(input) {
  const kind = input.dataset.kind;
  if (kind === "boolean") return input.checked;
  const text = input.value;
  if (text === "") return undefined;
  if (kind === "integer") return parseInt(text, 10);
  if (kind === "number") return Number(text);
  if (kind === "json") return JSON.parse(text);
  return text;
}

function collectArguments(form) {
  const args = {};
  for (const input of form.querySelectorAll("[data-arg]")) {
    const value = fieldValue(input);
    if (value !== undefined) args[input.dataset.arg] = value;
  }
  return args;
}

document.addEventListener("submit", (event) => {
  const form = event.target;
  if (!form.matches("form.tool")) return;
  if (form.matches(".preview")) { // a schema shown as a form, with nowhere to send it
    event.preventDefault();
    return;
  }
  const target = form.querySelector("textarea[name=arguments]");
  const raw = form.querySelector("input[name=mode]:checked");
  if (raw && raw.value === "json") return; // the JSON text as typed
  try {
    target.value = JSON.stringify(collectArguments(form));
  } catch (err) {
    event.preventDefault();
    alert("A JSON field does not parse: " + err.message);
  }
});
