-- A tenant's latest leaf of the log of logs, below a size, in one index probe: the
-- proof route's lookup and a runner's reopening (docs/design/c2sp.md).
CREATE INDEX log_of_logs_by_tenant ON log_of_logs (tenant_id, idx);
