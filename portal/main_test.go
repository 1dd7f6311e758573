package portal_test

import (
	"fmt"
	"testing"

	"svc.dev/svc/internal/svcbin"
)

var svcPath string

func TestMain(m *testing.M) { svcbin.Main(m, &svcPath) }

func svcBinary(testing.TB) string { return svcPath }

func errorf(format string, a ...any) error { return fmt.Errorf(format, a...) }
