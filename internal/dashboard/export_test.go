package dashboard

// LogDeliveries is logDeliveries, for the tests of package dashboard_test.
var LogDeliveries = logDeliveries
