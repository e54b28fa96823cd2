//! The grants of a login, one method each on [`OAuth`]: the browser's authorization code, the
//! device code, and the three with nobody at a browser (client credentials, workload
//! identity's JWT-bearer grant, enterprise-managed authorization). `OAuth::login` (in the
//! module above) picks one by the settings and keeps what it returns; each here only finds
//! the client it logs in as and runs its grant through the login's fetcher, which proves
//! possession of the login's DPoP key when it has one.

use super::discovery::Discovered;
use super::login;
use super::store::{self, Record, TokenRecord};
use super::{exchange, register, OAuth, Recover};

impl OAuth {
    /// The device login: the server must offer it; client (registration kept even if the
    /// login fails), then the device authorization grant.
    pub(super) async fn device(
        &self,
        found: &Discovered,
        rec: &mut Record,
        scope: Option<&str>,
    ) -> Result<TokenRecord, Recover> {
        login::device_endpoint(&found.server).map_err(Recover::Failed)?;
        let client = self.client(found, "").await?;
        rec.client = Some(client.clone());
        self.keep(rec.clone()).await;
        login::device(
            &self.grant_fetch(rec),
            &found.server,
            &client,
            self.resource_param(rec),
            scope,
            &self.settings.login,
        )
        .await
        .map_err(Recover::Failed)
    }

    /// The machine login: the client credentials grant with the static client, no refresh
    /// token kept.
    pub(super) async fn machine(
        &self,
        found: &Discovered,
        rec: &mut Record,
        scope: Option<&str>,
    ) -> Result<TokenRecord, Recover> {
        // The secret or key stays in its file: the login file holds only the id.
        rec.client = self.static_record();
        let mut t = login::client_credentials(
            &self.grant_fetch(rec),
            &found.server,
            &self.settings.client,
            self.resource_param(rec),
            scope,
            &self.settings.login,
        )
        .await
        .map_err(Recover::Failed)?;
        // RFC 6749 §4.4.3: none is expected; the grant itself is the way to a new token.
        t.refresh_token = None;
        Ok(t)
    }

    /// The client to log in as: the static one, the cached registration, or a new one.
    async fn client(
        &self,
        found: &Discovered,
        redirect: &str,
    ) -> Result<store::ClientRecord, Recover> {
        let cached = self
            .record
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .filter(|r| r.auth_server.issuer == found.server.issuer)
            .and_then(|r| r.client);
        register::client_for(
            &self.fetch,
            &found.server,
            &self.settings.client,
            cached.as_ref(),
            redirect,
        )
        .await
        .map_err(Recover::Failed)
    }

    /// The browser login: callback listener, client, authorization code.
    pub(super) async fn browser(
        &self,
        found: &Discovered,
        rec: &mut Record,
        scope: Option<&str>,
    ) -> Result<TokenRecord, Recover> {
        let listener =
            login::bind_callback(self.server.as_str(), self.settings.login.callback_port)
                .await
                .map_err(Recover::Failed)?;
        let redirect = login::redirect_uri(&listener);
        let client = self.client(found, &redirect).await?;
        rec.client = Some(client.clone());
        // Keep the registration even if the login below fails: it is reused next time.
        self.keep(rec.clone()).await;
        login::authorize(
            &self.grant_fetch(rec),
            &found.server,
            &client,
            self.resource_param(rec),
            scope,
            &self.settings.login,
            listener,
        )
        .await
        .map_err(Recover::Failed)
    }

    /// Workload identity: the JWT-bearer grant with the workload's JWT, read afresh.
    pub(super) async fn workload(
        &self,
        found: &Discovered,
        rec: &mut Record,
        scope: Option<&str>,
    ) -> Result<TokenRecord, Recover> {
        let Some(source) = &self.settings.workload else {
            return Err(Recover::Failed("no workload JWT was configured".into()));
        };
        rec.client = self.static_record();
        let jwt = source
            .read("--oauth-jwt-bearer-file/-command")
            .await
            .map_err(Recover::Failed)?;
        let seen = self.not_refused(&jwt)?;
        let r = exchange::jwt_bearer(
            &self.grant_fetch(rec),
            &found.server,
            &self.settings.client,
            &jwt,
            self.resource_param(rec),
            scope,
            &self.settings.login.params,
        )
        .await;
        self.remember_refusal(seen, r)
    }

    /// `assertion`'s hash, unless the grant refused it last time: then that refusal again
    /// (SEP-1933: a refused assertion is not retried; a new one from the source is).
    fn not_refused(&self, assertion: &store::Secret) -> Result<String, Recover> {
        use sha2::Digest;
        let h = format!("{:x}", sha2::Sha256::digest(assertion.0.as_bytes()));
        let refused = self.refused.lock().unwrap_or_else(|p| p.into_inner());
        match refused.as_ref() {
            Some((seen, why)) if *seen == h => Err(Recover::Failed(format!(
                "{why} (the same assertion is not presented again; a new one will be)"
            ))),
            _ => Ok(h),
        }
    }

    fn remember_refusal(
        &self,
        seen: String,
        r: Result<TokenRecord, String>,
    ) -> Result<TokenRecord, Recover> {
        let mut refused = self.refused.lock().unwrap_or_else(|p| p.into_inner());
        match r {
            Ok(t) => {
                *refused = None;
                Ok(t)
            }
            Err(why) => {
                *refused = Some((seen, why.clone()));
                Err(Recover::Failed(why))
            }
        }
    }

    /// Enterprise-managed authorization: the ID token for an ID-JAG at the IdP, then the
    /// JWT-bearer grant with it.
    pub(super) async fn enterprise(
        &self,
        found: &Discovered,
        rec: &mut Record,
        scope: Option<&str>,
    ) -> Result<TokenRecord, Recover> {
        let Some(idp) = &self.settings.idp else {
            return Err(Recover::Failed(
                "no identity provider was configured".into(),
            ));
        };
        rec.client = self.static_record();
        let id_token = idp
            .id_token
            .read("the ID token")
            .await
            .map_err(Recover::Failed)?;
        let seen = self.not_refused(&id_token)?;
        let r = exchange::enterprise(
            &self.grant_fetch(rec),
            &self.fetch,
            &found.server,
            &self.settings.client,
            idp,
            &id_token,
            &rec.resource,
            scope,
            &self.settings.login.params,
        )
        .await;
        self.remember_refusal(seen, r)
    }

    /// The static client's id as the login file keeps it (its secret or key stays in its file).
    fn static_record(&self) -> Option<store::ClientRecord> {
        self.settings
            .client
            .client_id
            .clone()
            .map(|id| store::ClientRecord {
                client_id: id,
                client_secret: None,
                redirect_uri: String::new(),
                registered: false,
                token_endpoint_auth_method: None,
            })
    }
}
