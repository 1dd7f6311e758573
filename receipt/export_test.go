package receipt

// BundleFile exposes bundleFile to the external tests.
var BundleFile = bundleFile

// WriteFileNoSync exposes writeFileNoSync to the external tests.
var WriteFileNoSync = writeFileNoSync

// WriteFileNoSyncIn exposes writeFileNoSyncIn (the bundle writer's, relative to its
// open receipts directory).
var WriteFileNoSyncIn = writeFileNoSyncIn
