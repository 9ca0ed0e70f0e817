// Every request of the page goes through api(): it adds the bearer token kept in sessionStorage,
// and on 401 asks for a token (one dialog, however many requests were refused) and retries.

const TOKEN_KEY = "ferry.dashboard.token";

export class AuthCancelled extends Error {
  constructor() {
    super("a bearer token is needed and none was given");
  }
}

let prompt = null; // the open token dialog's promise, shared by every refused request

export function currentToken() {
  return sessionStorage.getItem(TOKEN_KEY) || "";
}

export function forgetToken() {
  sessionStorage.removeItem(TOKEN_KEY);
  document.dispatchEvent(new CustomEvent("ferry-token"));
}

function askForToken(message) {
  if (prompt) return prompt;
  const dialog = document.getElementById("token-dialog");
  const form = document.getElementById("token-form");
  const input = document.getElementById("token-input");
  document.getElementById("token-message").textContent = message;
  input.value = "";
  prompt = new Promise((resolve) => {
    const finish = (token) => {
      form.removeEventListener("submit", submitted);
      dialog.removeEventListener("cancel", cancelled);
      document.getElementById("token-cancel").removeEventListener("click", cancelled);
      if (dialog.open) dialog.close();
      prompt = null;
      if (token) {
        sessionStorage.setItem(TOKEN_KEY, token);
        document.dispatchEvent(new CustomEvent("ferry-token"));
      }
      resolve(token);
    };
    const submitted = (event) => {
      event.preventDefault();
      const token = input.value.trim();
      if (token) finish(token);
    };
    const cancelled = (event) => {
      event.preventDefault();
      finish(null);
    };
    form.addEventListener("submit", submitted);
    dialog.addEventListener("cancel", cancelled); // Escape
    document.getElementById("token-cancel").addEventListener("click", cancelled);
    dialog.showModal();
    input.focus();
  });
  return prompt;
}

/** fetch() with the session's bearer token; resolves to the Response, or throws AuthCancelled. */
export async function api(path, init = {}) {
  for (;;) {
    const sent = currentToken();
    const headers = new Headers(init.headers || {});
    if (sent) headers.set("Authorization", `Bearer ${sent}`);
    const response = await fetch(path, { ...init, headers, cache: "no-store" });
    if (response.status !== 401) return response;
    if (currentToken() !== sent) continue; // another request already got a new token
    const token = await askForToken(sent
      ? "The server did not accept that token. Enter a valid one."
      : "This server asks for a bearer token. It is kept in this tab only (sessionStorage).");
    if (!token) throw new AuthCancelled();
  }
}

/** The JSON body of a successful response, or an Error carrying the server's {"error"} text. */
export async function jsonOrError(response) {
  const text = await response.text();
  let body = null;
  try {
    body = text ? JSON.parse(text) : null;
  } catch {
    body = null;
  }
  if (!response.ok) {
    const reason = body && typeof body.error === "string" ? body.error : text || response.statusText;
    const error = new Error(`${response.status}: ${reason}`);
    error.status = response.status;
    throw error;
  }
  return body;
}
