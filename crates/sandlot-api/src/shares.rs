//! A tenant's disk cap put into force through the router's backend (the claims themselves
//! are the service's: `sandlot_service::Service::claim`).

use crate::backend::Backend;
use sandlot_service::shares::disk_cap;
use sandlot_types::Tenant;

/// Puts `tenant`'s `max_disk_bytes` into force on the disk (at startup and whenever a
/// tenant is made or changed). A failure is logged: admission still checks the setting.
pub(crate) fn sync_disk_cap<B: Backend>(backend: &B, tenant: &Tenant) {
    if let Err(e) = backend.set_tenant_disk_cap(&tenant.name, disk_cap(tenant)) {
        tracing::warn!(tenant = %tenant.name, error = %e.message, "could not set the tenant's disk cap");
    }
}
