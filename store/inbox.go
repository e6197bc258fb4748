package store

// The provider inbox persists payment.ProviderEvent values, the payment
// domain's type for a provider event (a webhook an adapter verified and
// parsed): by (Source, EventID), with its normalised Type, the provider's
// own type, the object it is about (ObjectID, IntentID), the order id of its
// Reference, its Reference.Key as provider_key, its Amount (minor units) and
// Currency, and ReceivedAt. See Executor.RecordInboxEvent.
