package receipt

// BundleFile exposes bundleFile to the external tests.
var BundleFile = bundleFile
