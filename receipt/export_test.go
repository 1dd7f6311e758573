package receipt

// BundleFile exposes bundleFile to the external tests.
var BundleFile = bundleFile

// WriteFileNoSync exposes writeFileNoSync to the external tests.
var WriteFileNoSync = writeFileNoSync
