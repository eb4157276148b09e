//! Fair shares at the REST edge: the service's claims (`sandlot_service::shares`) with what
//! the router's backend counts.

use crate::backend::Backend;
use crate::error::HttpError;
use crate::AppState;
use sandlot_service::shares::{claim, disk_cap};
use sandlot_tenancy::{Claim, Share};
use sandlot_types::{Principal, Tenant};

/// Puts `tenant`'s `max_disk_bytes` into force on the disk (at startup and whenever a
/// tenant is made or changed). A failure is logged: admission still checks the setting.
pub(crate) fn sync_disk_cap<B: Backend>(backend: &B, tenant: &Tenant) {
    if let Err(e) = backend.set_tenant_disk_cap(&tenant.name, disk_cap(tenant)) {
        tracing::warn!(tenant = %tenant.name, error = %e.message, "could not set the tenant's disk cap");
    }
}

/// [`claim`] with what the backend counts of `share` (paused sandboxes, volumes, snapshots,
/// templates).
pub(crate) async fn claim_held<B: Backend>(
    st: &AppState<B>,
    who: &Principal,
    share: Share,
) -> Result<Option<Claim>, HttpError> {
    claim(st.gov.as_deref(), who, share, |t, share| {
        st.backend.tenant_held(t, share)
    })
    .await
    .map_err(HttpError)
}
