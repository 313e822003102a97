//! Phase `check_secrets` of the gate (`crate::secrets`): a secret's placeholder sent where it
//! does not belong, or its real value sent to any host but its own, is refused before
//! anything about the host is looked up; a request that passes gets its [`Plan`] (what to
//! inject, what to scrub from the answer), made once per request and carried to the verdict
//! ([`Gate::decide_with`]), which names the secrets used in the record. Also the redaction
//! of agent-typed text by secret values, which every record the gate builds goes through.
//!
//! Never: decides anything but the secrets (the egress lists are `gate/egress.rs`), or puts
//! a value anywhere but a plan.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Instant;

use crate::audit::{DecisionRecord, Outcome as LogOutcome};
use crate::policy::{Decision, Outcome, Reason};
use crate::secrets::{Plan, SecretRequest};

use super::{BlockKind, Blocked, Gate, GateRequest};

impl Gate {
    /// The secrets a request may carry, as [`crate::secrets::Secrets::check`] reads it.
    fn secret_request<'r>(req: &'r GateRequest<'r>) -> SecretRequest<'r> {
        SecretRequest {
            agent: &req.agent.id,
            tls: req.origin.scheme() == crate::fetch::Scheme::Https,
            host: req.origin.bare_host(),
            port: req.origin.port(),
            method: req.method,
            path_and_query: req.path_and_query,
            headers: req.headers,
        }
    }

    /// Phase `check_secrets` (first in the proxy's egress step, before [`Gate::check_egress_lists`], before anything is looked
    /// up): a secret's placeholder sent where it does not belong, or its real value sent to
    /// any host but its own, is refused, in monitor mode too (`crate::secrets`). The plan of
    /// a request that passes is what [`Gate::decide_with`] carries on to the forward.
    ///
    /// # Errors
    /// A [`Blocked`] (403, `secrets.*`) naming the secret and where it was found. No grant or
    /// human's approval of the host admits it.
    pub fn check_secrets(&self, req: &GateRequest<'_>) -> Result<Plan, Box<Blocked>> {
        let misuse = match self.secrets.check(&Self::secret_request(req), Instant::now()) {
            Ok(plan) => return Ok(plan),
            Err(misuse) => misuse,
        };
        let decision = Decision::single(Outcome::Deny, Reason::new(misuse.code, misuse.rule));
        let mut record = self.record_for(LogOutcome::Deny, req);
        record.set_reasons(&decision);
        Err(Box::new(Blocked { decision, record, kind: BlockKind::Policy, policies: None }))
    }

    /// `text`, typed by an agent, with every secret's value (in any case) replaced by its
    /// name (`Secrets::redact`): what a record or a diagnostic line may show of it.
    pub fn redacted<'t>(&self, text: &'t str) -> Cow<'t, str> {
        self.secrets.redact(text).map_or(Cow::Borrowed(text), Cow::Owned)
    }

    /// The secrets not bound to `host:port`, with their values, for request inspection to
    /// look for in what is sent there (`Secrets::values_elsewhere`).
    pub fn secret_values_elsewhere(&self, host: &str, port: u16) -> Vec<(String, Arc<zeroize::Zeroizing<String>>)> {
        self.secrets.values_elsewhere(host, port, Instant::now())
    }

    /// The secrets to inject into a request let through, named in its record
    /// (`agentgate.secrets`): `checked`, the plan [`Gate::check_secrets`] made for it, or
    /// for a request decided without one (a passthrough's host-level check, a held request
    /// a human approved) the check made again. [`Gate::check_secrets`] refused every
    /// misuse already.
    pub(super) fn secrets_plan(
        &self,
        req: &GateRequest<'_>,
        record: &mut DecisionRecord,
        checked: Option<Plan>,
    ) -> Plan {
        let checked = checked.map_or_else(|| self.secrets.check(&Self::secret_request(req), Instant::now()), Ok);
        match checked {
            Ok(plan) => {
                record.secrets = plan.used();
                plan
            }
            Err(misuse) => {
                tracing::warn!(code = misuse.code.as_str(), "secrets not injected: {}", misuse.rule);
                Plan::default()
            }
        }
    }
}
