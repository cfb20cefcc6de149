// A real OpenID Connect provider for the sign-in tests: panva's certified `oidc-provider`, run
// locally on 127.0.0.1 with one confidential client and a few people. Its development interactions
// (a login form that takes any password, then a consent form) stand in for the organisation's
// login page; everything after them — authorization codes, PKCE, the token endpoint, signed ID
// tokens, JWKS, userinfo — is the library's own.
//
//   OIDC_REDIRECT_URIS=http://127.0.0.1:8000/oidc/callback/ node tests/oidc/provider.js
//
// It listens on a free port (OIDC_PORT to choose one) and prints one JSON line:
// {"issuer": "http://127.0.0.1:<port>"}. It stops when its standard input closes.
import http from "node:http";
import Provider from "oidc-provider";

export const CLIENT_ID = "approval-gateway";
export const CLIENT_SECRET = "test-client-secret-of-the-approval-gateway";

// The login the dev form takes is the subject (any password): opaque ids, as an IdP's are, so the
// gateway must link by `sub` and not by a name. Each has an email, a username and the groups claim,
// whose values are the groups' ids at the IdP (as Entra ID sends them), not their names.
export const GROUP_IDS = {
  payments: "5f2d1c9a-7b3e-4e8a-9c61-2a4f0e7d3b15",
  research: "9a8e2b41-3c7d-4f06-b5e2-71c0d6a9f384",
};
export const PEOPLE = {
  "7f3a91c2": { username: "dana", email: "dana@example.com", name: "Dana Payments", groups: [GROUP_IDS.payments] },
  "b40e5d17": { username: "erik", email: "erik@example.com", name: "Erik Research", groups: [GROUP_IDS.research] },
  "c9d2e8a0": { username: "fay", email: "fay@example.com", name: "Fay Nogroups", groups: [] },
};

// Tests add or change an account as its owner could at a real IdP (a new account, a new email, an
// unverified one, groups of their own making): PUT /test/accounts/<subject> with the account's JSON.
function testAccounts(req, res) {
  const subject = decodeURIComponent(req.url.slice("/test/accounts/".length));
  let body = "";
  req.on("data", (chunk) => (body += chunk));
  req.on("end", () => {
    try {
      const account = JSON.parse(body);
      PEOPLE[subject] = { email_verified: true, groups: [], ...account };
      res.writeHead(204).end();
    } catch (err) {
      res.writeHead(400).end(String(err));
    }
  });
}

const redirectUris = (process.env.OIDC_REDIRECT_URIS || "").split(",").filter(Boolean);
if (!redirectUris.length) {
  console.error("OIDC_REDIRECT_URIS is required (the gateway's /oidc/callback/ URL)");
  process.exit(2);
}

const server = http.createServer();
server.listen(Number(process.env.OIDC_PORT || 0), "127.0.0.1", () => {
  const issuer = `http://127.0.0.1:${server.address().port}`;
  const provider = new Provider(issuer, {
    clients: [
      {
        client_id: CLIENT_ID,
        client_secret: CLIENT_SECRET,
        redirect_uris: redirectUris,
        grant_types: ["authorization_code"],
        response_types: ["code"],
        token_endpoint_auth_method: "client_secret_post",
        id_token_signed_response_alg: "RS256",
      },
    ],
    scopes: ["openid", "email", "profile", "groups"],
    claims: {
      openid: ["sub"],
      email: ["email", "email_verified"],
      profile: ["name", "preferred_username"],
      groups: ["groups"],
    },
    async findAccount(ctx, id) {
      const person = PEOPLE[id];
      if (!person) return undefined;
      return {
        accountId: id,
        async claims() {
          return {
            sub: id,
            email: person.email,
            email_verified: person.email_verified ?? true,
            name: person.name,
            preferred_username: person.username,
            groups: person.groups,
          };
        },
      };
    },
    features: { devInteractions: { enabled: true } },
    pkce: { required: () => true },
    cookies: { keys: ["a-test-only-cookie-key-for-the-oidc-provider"] },
  });
  provider.on("server_error", (ctx, err) => console.error("server_error", err));
  const handle = provider.callback();
  server.on("request", (req, res) =>
    req.method === "PUT" && req.url.startsWith("/test/accounts/") ? testAccounts(req, res) : handle(req, res),
  );
  process.stdout.write(JSON.stringify({ issuer }) + "\n");
});

process.stdin.on("end", () => process.exit(0));
process.stdin.resume();
